"""Whether a record's code can be traced: the commit it names is in the history of the checkout the record
lies in (an ancestor of its HEAD), and its tree was clean or the record stores the diff it ran with
(environment.git_diff). A run whose commit was squashed or rebased away, or whose uncommitted changes were
not stored, cannot be checked out again.

results/runs/UNTRACED.txt lists the committed records that cannot (tests/test_records_traced.py keeps it true);
phm-collect marks the rows made from them and leaves them out with --traced-only.
"""

import functools
import re
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from ..results import Environment, Result

TRACED, UNTRACED, UNKNOWN = "traced", "untraced", "unknown"
LIST_FILE = "results/runs/UNTRACED.txt"  # the committed records that cannot be traced, kept but marked
MARK = "†"  # after a row made from such a record, in every table of a report
FOOTNOTE = (
    f"{MARK} made from a record whose code cannot be traced: it names a commit missing from main's history, or a "
    f"tree with uncommitted changes that it did not store ({LIST_FILE} lists the committed ones and why)."
)


@dataclass(frozen=True)
class Trace:
    state: str  # TRACED, UNTRACED, or UNKNOWN where the checkout has no history to check it against
    why: str = ""  # what breaks the trace, or why it could not be checked; "" when traced


@dataclass(frozen=True)
class Checkout:
    root: Path
    shallow: bool


def _git(cwd: Path, *args) -> subprocess.CompletedProcess:
    return subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True)


def checkout_of(folder: Path) -> Optional[Checkout]:
    """The git checkout ``folder`` lies in; None where it lies in none (or git is missing)."""
    try:
        found = _git(folder, "rev-parse", "--show-toplevel", "--is-shallow-repository")
    except OSError:
        return None
    if found.returncode != 0:
        return None
    root, shallow = found.stdout.split("\n")[:2]
    return Checkout(Path(root), shallow == "true")


@functools.lru_cache(maxsize=None)
def _history_has(root: Path, commit: str) -> Optional[str]:
    """None where ``commit`` is an ancestor of the checkout's HEAD, else what it is instead."""
    full = _git(root, "rev-parse", "--verify", "--quiet", f"{commit}^{{commit}}")
    if full.returncode != 0:
        return "commit not in the repository"
    if _git(root, "merge-base", "--is-ancestor", full.stdout.strip(), "HEAD").returncode != 0:
        return "commit not in the history of HEAD"
    return None


def trace(environment: Environment, folder: Path) -> Trace:
    """Whether the record of ``environment``, lying in ``folder``, can be traced to its code."""
    commit, _, rest = environment.git_commit.partition("+")
    problems = []
    if rest == "uncommitted" and not environment.git_diff:
        problems.append("uncommitted changes not stored")
    if not re.fullmatch(r"[0-9a-f]{4,40}", commit):
        return Trace(UNTRACED, "; ".join([f"names no commit ({environment.git_commit})", *problems]))
    checkout = checkout_of(Path(folder))
    missing = _history_has(checkout.root, commit) if checkout else None
    if missing and not checkout.shallow:
        problems.insert(0, missing)
    if problems:
        return Trace(UNTRACED, "; ".join(problems))
    if checkout is None:
        return Trace(UNKNOWN, "the record lies in no git checkout to check its commit against")
    if missing:  # a shallow clone may have cut it off
        return Trace(UNKNOWN, f"the checkout's history is shallow and lacks {commit}")
    return Trace(TRACED)


def trace_record(result: Result, folder: Path) -> Trace:
    """A result.json's trace: the code that trained it and, where a later phm-run evaluated it again
    (``evaluated_in``), that run's code too."""
    trained = trace(result.environment, folder)
    if result.evaluated_in is None or trained.state != TRACED:
        return trained
    evaluated = trace(result.evaluated_in, folder)
    return evaluated if evaluated.state == TRACED else Trace(evaluated.state, f"evaluated again from: {evaluated.why}")
