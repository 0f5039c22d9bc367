"""Every committed record traces to its code (phm_experiments.report.trace), or is listed in
results/runs/UNTRACED.txt, and that list holds only records that do not."""

from pathlib import Path

import pytest

from phm_experiments.report.trace import LIST_FILE, UNKNOWN, UNTRACED, checkout_of, trace
from phm_experiments.results import Result

REPO = Path(__file__).resolve().parent.parent
RUNS = REPO / "results/runs"


def listed() -> dict[str, str]:
    """UNTRACED.txt's lines: {record folder below results/runs: the commit it names}."""
    entries = {}
    for line in (REPO / LIST_FILE).read_text(encoding="utf-8").splitlines():
        if line.strip() and not line.startswith("#"):
            folder, commit, _why = line.split(maxsplit=2)
            entries[folder] = commit
    return entries


@pytest.fixture(scope="module")
def traces() -> dict[str, tuple]:
    """{record folder below results/runs: (the commit it names, its Trace)} of every record there."""
    checkout = checkout_of(REPO)
    if checkout is None:
        pytest.skip("not a git checkout: no history to trace the records' commits in")
    if checkout.shallow:
        pytest.skip("a shallow clone: its history may lack the records' commits (git fetch --unshallow)")
    found = {}
    for file in sorted(RUNS.rglob("result.json")):
        environment = Result.read(file).environment
        found[str(file.parent.relative_to(RUNS))] = (environment.git_commit, trace(environment, file.parent))
    return found


def test_every_record_traces_to_main_or_is_listed(traces):
    unlisted = [
        f"{folder}  {commit}  {found.why}"
        for folder, (commit, found) in traces.items()
        if found.state == UNTRACED and folder not in listed()
    ]
    assert not unlisted, (
        "records whose code cannot be traced: train from a commit in main's history (phm-run stores the diff of an "
        f"uncommitted tree); an older record kept as it is goes in {LIST_FILE}, whose rows phm-collect marks:\n"
        + "\n".join(unlisted)
    )
    unchecked = [f"{folder}: {found.why}" for folder, (_, found) in traces.items() if found.state == UNKNOWN]
    assert not unchecked, "\n".join(unchecked)


def test_the_list_holds_only_untraced_records_as_they_are(traces):
    stale = []
    for folder, commit in listed().items():
        if folder not in traces:
            stale.append(f"{folder}: no such record")
        elif traces[folder][1].state != UNTRACED:
            stale.append(f"{folder}: traced now (retrained?)")
        elif traces[folder][0] != commit:
            stale.append(f"{folder}: names {traces[folder][0]}, not {commit}")
    assert not stale, f"{LIST_FILE} is out of date; remove or correct these lines:\n" + "\n".join(stale)
