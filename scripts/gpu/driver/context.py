"""What every part takes: the mode, the interpreter, the folders, the commands' environment, the clock,
the report and the processes."""

import dataclasses
import os
import tarfile
from pathlib import Path

from .clock import Budget
from .modes import Mode
from .paths import REPO
from .processes import Processes
from .report import Report

LOGS = {"install": "setup.log", "data": "setup.log"}  # the other parts log to <part>.log


@dataclasses.dataclass
class Context:
    mode: Mode
    python: str  # the interpreter that runs every part
    out: Path  # the report, the logs, artifacts.tar
    work: Path  # scratch: installed wheels, data, runs
    wheels: Path  # scripts/gpu/wheels, carried to the GPU machine
    parts: tuple  # the parts asked for
    budget: Budget
    report: Report
    processes: Processes

    @classmethod
    def create(cls, mode: Mode, python: str, out: Path, work: Path, wheels: Path, started: float, parts, command):
        report = Report.start(out, mode.name, mode.budget_s, started, parts, command)
        site = work / "site"
        paths = [str(REPO)] if not mode.gpu else [str(site), str(REPO)]
        env = {
            **os.environ,
            "PYTHONPATH": os.pathsep.join(paths + [p for p in [os.environ.get("PYTHONPATH")] if p]),
            "PATH": os.pathsep.join([str(site / "bin"), str(Path(python).parent), os.environ.get("PATH", "")]),
            "PYTHON": python,  # data-prep's helpers
            "PYTHONUNBUFFERED": "1",
            "MPLBACKEND": "Agg",
        }
        budget = Budget(started, mode.budget_s)
        return cls(mode, python, out, work, wheels, tuple(parts), budget, report, Processes(REPO, env))

    @property
    def env(self) -> dict:
        return self.processes.env

    @property
    def site(self) -> Path:
        """The installed wheels (GPU)."""
        return self.work / "site"

    @property
    def data(self) -> Path:
        return self.work / "data-bin" / "multi30k.en-de"

    def log(self, part: str) -> Path:
        return self.out / LOGS.get(part, f"{part}.log")

    def artifact(self, path: Path, name: str) -> None:
        """Adds ``path`` to OUT/artifacts.tar as ``name`` (a path of this repository)."""
        with self.report.lock, tarfile.open(self.out / "artifacts.tar", "a") as tar:
            tar.add(path, arcname=name)
