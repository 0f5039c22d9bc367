"""The processes the parts start: each in a session of its own, so that stopping it stops everything it
started; waited for until a deadline; all of them stopped when the command ends (SIGTERM, Ctrl-C)."""

import contextlib
import datetime
import os
import shlex
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

from .clock import TimedOut

STOPPED = "the command was stopped (SIGTERM or Ctrl-C): its processes too"


class Processes:
    """The running processes of a run, in the folder ``cwd`` and the environment ``env``."""

    def __init__(self, cwd: Path, env: dict):
        self.cwd, self.env = cwd, env
        self.children = set()  # running process groups, stopped on exit
        self.lock = threading.Lock()
        self.stopping = False  # stop_all() was called: no process starts, a part that ends is "stopped"

    def start(self, command: list, log: Path, env=None) -> subprocess.Popen:
        with open(log, "a", encoding="utf-8") as file, self.lock:
            if self.stopping:
                raise RuntimeError(STOPPED)
            started = datetime.datetime.now().isoformat(timespec="seconds")
            file.write(f"\n[{started}] $ {shlex.join(map(str, command))}\n")
            file.flush()
            process = subprocess.Popen(
                [str(c) for c in command], cwd=self.cwd, env=env or self.env, stdout=file, stderr=subprocess.STDOUT,
                start_new_session=True,
            )  # fmt: skip
            self.children.add(process)
        return process

    def wait(self, process: subprocess.Popen, deadline: float, poll=None) -> int:
        """The exit code of ``process``; at ``deadline`` it is stopped and TimedOut raised. ``poll``
        runs every few seconds meanwhile (to report what it has finished so far)."""
        try:
            while True:
                try:
                    return process.wait(timeout=max(0.1, min(5.0, deadline - time.time())))
                except subprocess.TimeoutExpired:
                    if poll:
                        poll()
                    if time.time() >= deadline:
                        stop(process)
                        raise TimedOut from None
        finally:
            if poll:
                poll()
            if process.returncode is not None:  # not when SIGTERM or Ctrl-C ends the wait: stop_all() stops it
                self.forget(process)

    def run(self, command: list, log: Path, deadline: float, env=None, poll=None) -> int:
        return self.wait(self.start(command, log, env), deadline, poll)

    def forget(self, process: subprocess.Popen) -> None:
        """``process`` has ended (or was stopped): stop_all() leaves it."""
        self.children.discard(process)

    def stop(self, process: subprocess.Popen) -> None:
        """Stops ``process`` and what it started, before its part ends."""
        stop(process)
        self.forget(process)

    def stop_all(self) -> None:
        with self.lock:
            self.stopping = True
            processes = list(self.children)
        for process in processes:
            stop(process)


def stop(process: subprocess.Popen) -> None:
    """Stops a process and everything it started (its own session): SIGTERM, SIGKILL 10 s later."""
    for sig, grace in ((signal.SIGTERM, 10), (signal.SIGKILL, 5)):
        if process.poll() is not None:
            return
        try:
            os.killpg(process.pid, sig)
        except ProcessLookupError:
            return
        try:
            process.wait(grace)
        except subprocess.TimeoutExpired:
            pass


@contextlib.contextmanager
def stopped_at_the_end(processes: Processes):
    """The command's own end, however it comes (its work done, an error, a time limit's SIGTERM, Ctrl-C),
    stops every process of ``processes``. SIGTERM ends the command as Ctrl-C does (exit code 143); once
    the end has begun, a second signal is ignored, since it would leave processes running."""
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))
    try:
        yield
    finally:
        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, signal.SIG_IGN)
        processes.stop_all()
