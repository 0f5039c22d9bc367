"""report.json and report.md in OUT, rewritten whole (atomically) after every step, and what the report
says of the machine before anything is installed."""

import dataclasses
import datetime
import json
import os
import platform
import shutil
import subprocess
import threading
import time
from pathlib import Path

from .markdown import markdown
from .modes import PARTS
from .paths import REPO


@dataclasses.dataclass
class Report:
    out: Path
    data: dict = dataclasses.field(default_factory=dict)
    lock: threading.Lock = dataclasses.field(default_factory=threading.Lock)

    @classmethod
    def start(cls, out: Path, mode: str, budget_s: float, started: float, parts, command: str) -> "Report":
        report = cls(out)
        report.data.update(
            issue=41,
            mode=mode,
            started=datetime.datetime.fromtimestamp(started).isoformat(timespec="seconds"),
            start_time=started,
            budget_s=budget_s,
            command=command,
            machine=machine(),
            parts={name: {"status": "pending" if name in parts else "not asked"} for name in PARTS},
        )
        report.update()
        return report

    def update(self, part: str = None, **values) -> None:
        with self.lock:
            target = self.data if part is None else self.data["parts"].setdefault(part, {})
            target.update(values)
            self.data["updated"] = now()
            self.data["elapsed_s"] = round(time.time() - self.data["start_time"], 1)
            write_atomically(self.out / "report.json", json.dumps(self.data, indent=2) + "\n")
            write_atomically(self.out / "report.md", markdown(self.data))

    def status(self, part: str) -> str:
        return self.data["parts"][part]["status"]


def now() -> str:
    return datetime.datetime.now().isoformat(timespec="seconds")


def write_atomically(path: Path, text: str) -> None:
    partial = path.with_name(f".{path.name}.partial")
    partial.write_text(text, encoding="utf-8")
    os.replace(partial, path)


def machine() -> dict:
    """What the report says of the machine, read without torch (which may not be installed yet)."""
    info = {"host_python": platform.python_version(), "cpu_cores": os.cpu_count(), "platform": platform.platform()}
    try:
        info["cpu"] = next(
            line.split(":", 1)[1].strip()
            for line in Path("/proc/cpuinfo").read_text().splitlines()
            if line.startswith("model name")
        )
    except (OSError, StopIteration):
        info["cpu"] = platform.processor()
    if shutil.which("nvidia-smi"):
        query = "--query-gpu=name,driver_version,memory.total,compute_cap"
        smi = subprocess.run(["nvidia-smi", query, "--format=csv,noheader"], capture_output=True, text=True)
        info["nvidia_smi"] = smi.stdout.strip() or smi.stderr.strip()
    try:
        git = ["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"]
        info["git_commit"] = subprocess.run(git, capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        info["git_commit"] = os.environ.get("PHM_GIT_COMMIT", "unknown (no .git in this copy)")
    return info
