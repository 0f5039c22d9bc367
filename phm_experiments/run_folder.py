"""A run's folder: where each of its files lies, the lock that keeps it to one phm-run, and what
--force removes. Every file name of a run is built here, from the templates below.

    RUNS/<config path under configs/, without .yaml>/seed<S>/
        checkpoints/                  fairseq-train's checkpoints, and fingerprint.json (fingerprint.py)
        checkpoints/code.json         the code (commit, diff) the training started from (resume.py)
        checkpoints/checkpoint_avg_lastN.pt   the average of the last N epoch checkpoints (evaluate.average_last)
        prepare.log, init.log, train.log, evaluate.log   every command with its output
        hypotheses.txt                the evaluated translations (hypotheses.epochN.txt for evaluate.epochs,
                                      hypotheses.avg_lastN.txt for evaluate.average_last)
        result.json                   the record (results.Result), written last
        distill/                      distilled training data made from this run as a teacher (distill.py)
        .phm-run.lock                 held by the phm-run working in this folder (who, since when, its command)
"""

import contextlib
import dataclasses
import fcntl
import os
import re
import shlex
import shutil
import socket
import sys
import time
from pathlib import Path

from .fingerprint import FILE as FINGERPRINT

CHECKPOINTS = "checkpoints"
BEST = "checkpoint_best.pt"
LAST = "checkpoint_last.pt"
EPOCH = "checkpoint{}.pt"  # fairseq's end-of-epoch checkpoint
AVERAGE = "avg_last{}"  # evaluate.average_last: its checkpoint and its hypotheses are named by it
AVERAGE_CHECKPOINT = f"checkpoint_{AVERAGE}.pt"
HYPOTHESES = "hypotheses{}.txt"  # {}: nothing (checkpoint_best.pt's), .epochN or .avg_lastN
STEP_LOGS = ("init", "train", "evaluate", "eval_losses")  # and prepare.log, which --force keeps: it made the data
RESULT = "result.json"
EVAL_LOSSES = "eval_losses.json"  # the losses with dropout off (eval_losses.py), measured after the record
LOCK = ".phm-run.lock"
CODE = "code.json"


def matching(template: str, fill: str = r"\d+") -> str:
    """The regular expression of the names that ``template`` makes, its {} standing for ``fill``."""
    return re.escape(template).replace(r"\{\}", fill)


EPOCH_CHECKPOINT = re.compile(matching(EPOCH, r"(\d+)"))
# fairseq-train's checkpoints (epoch, update, best, last, --keep-best-checkpoints) and phm-run's average
CHECKPOINT = rf"(?:checkpoint(\d+|_\d+_\d+|_best|_last|\.best_.+)\.pt|{matching(AVERAGE_CHECKPOINT)})"
# what fairseq-train saves whole and can resume from: epoch, mid-epoch and best checkpoints (not an average)
RESUMABLE = re.compile(r"checkpoint(\d+|_\d+_\d+|_best)\.pt")
# what --force removes, by exact names: in checkpoints/, the checkpoints, what a stop cut of one while it was
# written (fairseq's NAME.tmp, phm-run's .NAME.partial), the fingerprint and the code; in the run's folder, the
# record, the logs of the steps, the losses with dropout off and the hypotheses
MADE_IN_CHECKPOINTS = re.compile(
    rf"{CHECKPOINT}(\.tmp)?|\.{CHECKPOINT}\.partial|{re.escape(FINGERPRINT)}|{re.escape(CODE)}"
)
MADE_IN_FOLDER = re.compile(
    rf"{re.escape(RESULT)}|{re.escape(EVAL_LOSSES)}|({'|'.join(STEP_LOGS)})\.log|"
    + matching(HYPOTHESES, rf"(\.epoch\d+|\.{matching(AVERAGE)})?")
)


class RunError(RuntimeError):
    """A run cannot go on as things stand; the message says why and what to do."""


@dataclasses.dataclass(frozen=True)
class RunFolder:
    """The paths of a run's files in the layout above, by which a phm-run finds what an earlier one left."""

    path: Path

    @classmethod
    def of(cls, config_path: Path, runs_dir: Path, seed: int) -> "RunFolder":
        """RUNS/<config path under its configs/ folder, without .yaml>/seed<S> (a config outside configs/: its name)."""
        parts = Path(config_path).resolve().with_suffix("").parts
        relative = parts[len(parts) - parts[::-1].index("configs") :] if "configs" in parts else parts[-1:]
        return cls(Path(runs_dir).joinpath(*relative, f"seed{seed}"))

    @property
    def checkpoints(self) -> Path:
        return self.path / CHECKPOINTS

    @property
    def best(self) -> Path:
        return self.checkpoints / BEST

    @property
    def last(self) -> Path:
        return self.checkpoints / LAST

    @property
    def code(self) -> Path:
        return self.checkpoints / CODE

    def epoch(self, epoch: int) -> Path:
        return self.checkpoints / EPOCH.format(epoch)

    def average(self, count: int) -> Path:
        """The average of the last ``count`` epoch checkpoints (evaluate.average_last)."""
        return self.checkpoints / AVERAGE_CHECKPOINT.format(count)

    def hypotheses(self, epoch: int = None, average: int = None) -> Path:
        """The translations of checkpoint_best.pt, of the end of ``epoch``, or of the last ``average`` averaged."""
        suffix = f".epoch{epoch}" if epoch is not None else f".{AVERAGE.format(average)}" if average else ""
        return self.path / HYPOTHESES.format(suffix)

    def log(self, step: str) -> Path:
        """prepare.log, init.log, train.log, evaluate.log."""
        return self.path / f"{step}.log"

    @property
    def result(self) -> Path:
        return self.path / RESULT

    @property
    def eval_losses(self) -> Path:
        return self.path / EVAL_LOSSES

    @property
    def distill(self) -> Path:
        return self.path / "distill"

    def lock(self):
        """One phm-run at a time in a run folder (see run_lock)."""
        return run_lock(self.path)

    def clean(self, also=()) -> list:
        """--force: removes what phm-run and the commands it runs wrote here, by their exact names, and
        ``also`` (the init checkpoint where it lies in this folder); the data, prepare.log and any file of
        the user's stay. Returns what it removed."""
        removed = []
        if self.checkpoints.is_dir():
            for path in self.checkpoints.iterdir():
                if MADE_IN_CHECKPOINTS.fullmatch(path.name) and path.is_file():
                    path.unlink()
                    removed.append(path)
            if not any(self.checkpoints.iterdir()):
                self.checkpoints.rmdir()
        made = [path for path in self.path.iterdir() if MADE_IN_FOLDER.fullmatch(path.name) and path.is_file()]
        if self.distill.is_dir():  # distilled data (distill.py), made whole by phm-run
            made.append(self.distill)
        made += [path for path in also if path.exists() and self.path.resolve() in path.resolve().parents]
        for path in made:
            shutil.rmtree(path) if path.is_dir() else path.unlink()
            removed.append(path)
        return removed


def run_directory(config_path: Path, runs_dir: Path, seed: int) -> Path:
    return RunFolder.of(config_path, runs_dir, seed).path


@contextlib.contextmanager
def exclusive(path: Path, when_held, unwritable: str = ""):
    """An exclusive lock on the file ``path``, which names its holder while it is held (the system
    drops the lock when the process ends, however it ends). Where another process holds it,
    ``when_held(holder)`` decides: it raises to refuse, or returns to wait until the lock is free.
    Where the file cannot be written, a RunError says so, followed by ``unwritable`` (what to do)."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        file = open(path, "a+", encoding="utf-8")
    except OSError as error:
        raise RunError(f"cannot write {error.filename or path}: {error.strerror or error}{unwritable}") from None
    try:
        try:
            fcntl.flock(file, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            file.seek(0)
            when_held(file.read().strip() or "a process that has not said who it is yet")
            fcntl.flock(file, fcntl.LOCK_EX)
    except BaseException:
        file.close()
        raise
    try:
        file.seek(0)
        file.truncate()
        started = time.strftime("%Y-%m-%d %H:%M:%S")
        file.write(f"pid {os.getpid()} on {socket.gethostname()} since {started}: {shlex.join(sys.argv)}\n")
        file.flush()
        yield
    finally:
        file.truncate(0)
        file.close()  # releases the lock


def run_lock(run_dir: Path):
    """One phm-run at a time in a run folder: an exclusive lock on RUN/.phm-run.lock, held while the
    run is prepared, trained and evaluated; a second phm-run is refused with the holder's name."""

    def refuse(holder):
        raise RunError(
            f"{run_dir} is in use by another phm-run ({holder}): one phm-run at a time in a run folder. "
            "Wait for it to finish, or stop it and run again (an interrupted training resumes)"
        )

    hint = ". phm-run keeps each run's checkpoints, logs and result.json below --runs-dir: give one it can write to"
    return exclusive(Path(run_dir) / LOCK, refuse, hint)
