"""The commands phm-run runs (fairseq's, the plugin's, a config's own).

Every command's output is shown as it comes and kept in the run's log file; stdout and stderr
are read as bytes and split on "\\n" only.
"""

import contextlib
import io
import os
import shlex
import statistics
import subprocess
import sys
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from . import kernels
from .config import fill
from .fairseq_train import COMMAND

# fairseq prefetches batches in a thread (--data-buffer-size, 10 by default) that can abort the
# process at exit, after its work ("terminate called without an active exception"; see
# docs/troubleshooting.md); 0 reads them in the main thread, the DataLoader workers still prepare them
NO_PREFETCH_THREAD = ("--data-buffer-size", "0")


def plugin_dir() -> str:
    """The plugin's package folder, passed to fairseq as --user-dir (imported here, not with this
    module: importing the plugin imports fairseq)."""
    from phm_fairseq import PLUGIN_DIR

    return PLUGIN_DIR


def fairseq_train_command(data, *arguments) -> list:
    """fairseq-train as phm-run runs it (fairseq_train.py: early stopping that survives a resume)."""
    return [*COMMAND, str(data), "--user-dir", plugin_dir(), *NO_PREFETCH_THREAD, *arguments]


def fairseq_generate_command(data, checkpoint, *arguments) -> list:
    """fairseq-generate of ``checkpoint`` with the plugin, every example scored."""
    return [
        "fairseq-generate",
        str(data),
        "--user-dir",
        plugin_dir(),
        "--path",
        str(checkpoint),
        *NO_PREFETCH_THREAD,
        *arguments,
    ]


def options(mapping: dict, fields: dict = None) -> list:
    """{"max-tokens": 4096, "share-all-embeddings": True} -> ["--max-tokens", "4096", "--share-all-embeddings"]"""
    args = []
    for key, value in mapping.items():
        if value is None or value is False:
            continue
        args.append(f"--{key}")
        if value is not True:
            args.append(fill(value, fields or {}))
    return args


class CommandFailed(RuntimeError):
    def __init__(self, command: list, returncode: int, log: Path, stderr_tail: list):
        self.command, self.returncode, self.log, self.stderr_tail = command, returncode, log, stderr_tail
        super().__init__(f"`{shlex.join(command)}` failed with exit code {returncode} (its output: {log})")


class LoadAverage:
    """The machine's 1-minute load average (os.getloadavg), sampled every ``interval`` seconds while the
    block runs and once at its end: how much ran beside a command, which a speed set against another
    run's needs to know (a command of T threads alone keeps it near T; a second run beside it adds its own)."""

    def __init__(self, interval: float = 30.0):
        self.interval, self.samples = interval, []
        self._stop = threading.Event()
        self._sampler = threading.Thread(target=self._sample_until_stopped, daemon=True)

    def _sample(self) -> None:
        with contextlib.suppress(OSError):  # a platform without a load average records none
            self.samples.append(os.getloadavg()[0])

    def _sample_until_stopped(self) -> None:
        while not self._stop.wait(self.interval):
            self._sample()

    def __enter__(self) -> "LoadAverage":
        self._sampler.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._sampler.join()
        self._sample()

    @property
    def mean(self) -> Optional[float]:
        return round(statistics.fmean(self.samples), 2) if self.samples else None


@dataclass
class Finished:
    command: list
    returncode: int
    stdout: str
    stderr: str
    stderr_tail: list  # its last lines on stderr
    load_average: Optional[float] = None  # the machine's while it ran (LoadAverage.mean)

    @property
    def output(self) -> str:
        """stdout, then stderr: where fairseq's log records are depends on how logging was set up
        before the command configured it"""
        return self.stdout + self.stderr


# phm-run --native-kernels sets it False: each CPU's fastest kernels, not the same bits on another CPU
PIN_KERNELS = True


def environment() -> dict:
    """The commands' environment: this Python environment's commands (fairseq-train, sacremoses, ...)
    first on PATH, so that runs and data preparation use the installation the runner belongs to, and
    the kernels pinned (kernels.py) at this process's thread count."""
    import torch

    pins = kernels.pinned_environment(torch.get_num_threads()) if PIN_KERNELS else {}
    path = os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")])
    return {**os.environ, **pins, "PATH": path}


def run(command: list, log: Path, check: bool = True, quiet: bool = False, tail: int = 20) -> Finished:
    """Runs ``command``, showing its output as it comes (unless ``quiet``: then only its stderr)
    and keeping it in ``log``. Raises CommandFailed on a nonzero exit when ``check``; else the
    caller decides."""
    print(f"$ {shlex.join(command)}", flush=True)
    stdout, stderr = [], []
    lock = threading.Lock()
    try:
        process = subprocess.Popen(
            command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=environment(), preexec_fn=end_with_parent
        )
    except OSError as error:  # e.g. a command that is not installed
        raise CommandFailed(command, 127, log, [str(error)]) from None
    with open(log, "a", encoding="utf-8") as log_file, ends_with_caller(process), LoadAverage() as load:
        log_file.write(f"$ {shlex.join(command)}\n")

        def pump(stream, lines, console):
            for raw in iter(stream.readline, b""):  # readline splits on b"\n" only
                line = raw.decode("utf-8", errors="replace")
                with lock:
                    console.write(line)
                    console.flush()
                    log_file.write(line)
                    log_file.flush()  # the log can be followed as the command runs
                lines.append(line)

        threads = [threading.Thread(target=pump, args=(process.stderr, stderr, sys.stderr), daemon=True)]
        threads[0].start()
        pump(process.stdout, stdout, io.StringIO() if quiet else sys.stdout)
        threads[0].join()
        process.wait()
    stderr_tail = [line.rstrip("\n") for line in stderr[-tail:]]
    if check and process.returncode:
        raise CommandFailed(command, process.returncode, log, stderr_tail)
    return Finished(command, process.returncode, "".join(stdout), "".join(stderr), stderr_tail, load.mean)


def end_with_parent() -> None:
    """In the child, before it runs: Linux sends it SIGTERM when phm-run dies, even by SIGKILL, so
    that no training goes on writing checkpoints that nobody records (elsewhere: nothing to do)."""
    if sys.platform.startswith("linux"):
        import ctypes
        import signal

        PR_SET_PDEATHSIG = 1
        ctypes.CDLL(None).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)


@contextlib.contextmanager
def ends_with_caller(process: subprocess.Popen, grace: float = 30.0):
    """The command ends when its caller stops waiting for it: on an exception (Ctrl-C, phm-run's
    SIGTERM, an error) it is asked to stop (SIGTERM), then killed after ``grace`` seconds. fairseq
    writes each checkpoint to a temporary file first (its copy to checkpoint_last.pt is restored where
    a stop cut it: runner.restore_cut_last_checkpoint): the next phm-run resumes from the last whole one."""
    try:
        yield process
        process.wait()
    except BaseException:
        if process.poll() is None:
            process.terminate()
            try:
                process.wait(grace)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        raise
    finally:
        for stream in (process.stdout, process.stderr):
            if stream:
                stream.close()


def run_shell(command: str, log: Path) -> Finished:
    """A config's own command (prepare, init): a bash command line, so that `a && b` works."""
    return run(["bash", "-c", command], log)
