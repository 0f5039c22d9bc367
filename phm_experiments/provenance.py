"""Where a figure comes from: the machine, the versions and the code, stored next to results."""

import datetime
import importlib.metadata
import os
import platform
import re
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Optional

import torch

PACKAGE_ROOT = Path(__file__).resolve().parent.parent


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _git(*args) -> str:
    return subprocess.run(["git", *args], capture_output=True, text=True, cwd=PACKAGE_ROOT, check=True).stdout


# run records and benchmark reports are data that runs write, not code: a queue retraining a record beside
# this run (phm-run --force removes the old one), or `make bench` writing one report before timing the
# next, leaves the code as committed
RECORDS = ("results/runs", "benchmarks/results")


def _tracked_code(ignore: tuple = ()) -> list:
    """git's pathspec of the checkout but for the records and the paths ``ignore``."""
    return ["--", ".", *(f":(exclude){path}" for path in (*RECORDS, *ignore))]


def git_commit(ignore: tuple = ()) -> str:
    """The checkout's commit, marked +uncommitted when tracked files differ from it (but for changes
    to the paths ``ignore``: a record's own file, which writing the record changes)."""
    try:
        commit = _git("rev-parse", "--short", "HEAD").strip()
        changed = _git("status", "--porcelain", "--untracked-files=no", *_tracked_code(ignore)).strip()
        return commit + ("+uncommitted" if changed else "")
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def git_diff() -> Optional[str]:
    """What the tracked files change from the checkout's commit (``git diff HEAD``), so that a run
    made from an uncommitted tree can still be traced to its code; None when there is nothing."""
    try:
        return _git("diff", "HEAD", *_tracked_code()) or None
    except (OSError, subprocess.CalledProcessError):
        return None


def invocation() -> str:
    """This process's command line, as one would type it again."""
    script = sys.argv[0]
    head = ["python", os.path.relpath(script)] if script.endswith(".py") else [Path(script).name]
    return shlex.join(head + sys.argv[1:])


def _plugin_version() -> str:
    """The plugin's version, read, not imported (importing the plugin imports fairseq): the installed
    distribution's, or the checkout's own where it runs uninstalled (the GPU run puts it on sys.path)."""
    try:
        return importlib.metadata.version("phm-fairseq")
    except importlib.metadata.PackageNotFoundError:
        source = (Path(__file__).resolve().parents[1] / "phm_fairseq" / "__init__.py").read_text()
        return re.search(r'^__version__ = "([^"]+)"$', source, re.M).group(1)


def code_state() -> dict:
    """The checkout's code as a record names it: its commit, and its diff where the tree differs."""
    commit = git_commit()
    return {"git_commit": commit, "git_diff": git_diff() if commit.endswith("+uncommitted") else None}


def environment(device: str = "cpu", command=None, code=None) -> dict:
    """What made a record. ``code``: the checkout's code_state() taken when the work started (a clone
    pulled while a run trains must not lend the run its new commit); now when not given."""
    try:
        import fairseq

        fairseq_version = fairseq.__version__
    except ImportError:
        fairseq_version = None
    plugin_version = _plugin_version()

    from .commands import environment as commands_environment
    from .kernels import kernel_environment

    return {
        "date": datetime.datetime.now().isoformat(timespec="seconds"),
        "command": command or invocation(),
        **(code or code_state()),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "fairseq": fairseq_version,
        "phm_fairseq": plugin_version,
        "device": torch.cuda.get_device_name() if device == "cuda" else _cpu_model(),
        "threads": torch.get_num_threads(),
        # the kernels torch picked for the CPU (AVX2, AVX512; the host's on a GPU machine): one model name covers both
        "cpu_capability": torch.backends.cpu.get_cpu_capability(),
        # what chose the kernels of the commands it ran (kernels.py): empty where they were the CPU's own
        "kernels": kernel_environment(commands_environment()),
    }
