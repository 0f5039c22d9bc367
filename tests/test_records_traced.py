"""Every committed record traces to its code (phm_experiments.report.trace), or is listed in
results/runs/UNTRACED.txt, and that list holds only records that do not; phm-collect marks the rows of
such records, or leaves them out (--traced-only)."""

import csv
import json
import subprocess
from pathlib import Path
from types import SimpleNamespace

import pytest

from phm_experiments.report.trace import (
    FOOTNOTE,
    LIST_FILE,
    MARK,
    TRACED,
    UNKNOWN,
    UNTRACED,
    Trace,
    checkout_of,
    trace,
    trace_record,
)
from phm_experiments.results import Environment, Result

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
        result = Result.read(file)
        found[str(file.parent.relative_to(RUNS))] = (result.environment.git_commit, trace_record(result, file.parent))
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


def test_every_eval_losses_record_traces_to_main():
    """The losses with dropout off (phm_experiments.eval_losses) are measured from main's commits too."""
    checkout = checkout_of(REPO)
    if checkout is None or checkout.shallow:
        pytest.skip("no full git history to trace the records' commits in")
    untraced = []
    for file in sorted(RUNS.rglob("eval_losses.json")):
        found = trace(Environment(**json.loads(file.read_text())["environment"]), file.parent)
        if found.state != TRACED:
            untraced.append(f"{file.parent.relative_to(RUNS)}: {found.why}")
    assert not untraced, "\n".join(untraced)


def test_every_benchmark_report_traces_to_main():
    """The benchmark reports that README and docs quote were made from main's commits too: each names a
    commit in main's history, with a clean tree or the diff it ran with (the GPU run's report.json names
    its machine's commit)."""
    checkout = checkout_of(REPO)
    if checkout is None or checkout.shallow:
        pytest.skip("no full git history to trace the reports' commits in")
    untraced = []
    for file in sorted((REPO / "benchmarks/results").rglob("*.json")):
        report = json.loads(file.read_text())
        code = report["environment"] if "environment" in report else {"git_commit": report["machine"]["git_commit"]}
        found = trace(SimpleNamespace(git_commit=code["git_commit"], git_diff=code.get("git_diff")), file.parent)
        if found.state != TRACED:
            untraced.append(f"{file.relative_to(REPO)} ({code['git_commit']}): {found.why}")
    assert not untraced, "\n".join(untraced)


def git(cwd: Path, *args) -> str:
    command = ["git", "-c", "user.name=test", "-c", "user.email=test@example.com", *args]
    return subprocess.run(command, cwd=cwd, capture_output=True, text=True, check=True).stdout.strip()


def record_with(commit: str, diff=None) -> dict:
    """A committed record (the demo size's PHM n=4, seed 1), naming ``commit`` and ``diff``."""
    record = json.loads((RUNS / "converged/multi30k/phm_n4_lr008/seed1/result.json").read_text())
    record["environment"].update(git_commit=commit, git_diff=diff)
    return record


@pytest.fixture
def checkout(tmp_path) -> Path:
    """A git checkout of one commit, with room for runs."""
    git(tmp_path, "init", "-q")
    git(tmp_path, "commit", "-q", "--allow-empty", "-m", "start")
    return tmp_path


def write_runs(runs: Path, commits: dict[str, str]) -> None:
    """Committed records of the dense twin and PHM n=4 (seed 1), each naming the commit ``commits`` gives it."""
    for config, commit in commits.items():
        record = json.loads((RUNS / "converged/multi30k" / config / "seed1/result.json").read_text())
        record["environment"]["git_commit"] = commit
        (runs / config / "seed1").mkdir(parents=True)
        (runs / config / "seed1/result.json").write_text(json.dumps(record))


@pytest.mark.parametrize(
    "commit, diff, state",
    [
        ("HEAD", None, TRACED),
        ("HEAD+uncommitted", "diff --git a/x b/x\n", TRACED),
        ("HEAD+uncommitted", None, UNTRACED),
        ("0000000", None, UNTRACED),
        ("unknown", None, UNTRACED),
    ],
)
def test_a_record_traces_to_a_commit_of_its_checkout_with_its_diff(checkout, commit, diff, state):
    commit = commit.replace("HEAD", git(checkout, "rev-parse", "--short", "HEAD"))
    environment = Result.from_dict(record_with(commit, diff)).environment
    assert trace(environment, checkout).state == state


def test_a_commit_beside_the_history_does_not_trace(checkout):
    head = git(checkout, "rev-parse", "--short", "HEAD")
    git(checkout, "checkout", "-q", "-b", "queue")
    git(checkout, "commit", "-q", "--allow-empty", "-m", "a queue's commit")
    beside = git(checkout, "rev-parse", "--short", "HEAD")
    git(checkout, "checkout", "-q", head)
    found = trace(Result.from_dict(record_with(beside)).environment, checkout)
    assert found == Trace(UNTRACED, "commit not in the history of HEAD")


def test_a_record_evaluated_again_traces_to_both_codes(checkout):
    """A record that a later phm-run evaluated again names the training's code and the evaluation's: both
    must trace."""
    head = git(checkout, "rev-parse", "--short", "HEAD")
    record = record_with(head)
    record["evaluated_in"] = {**record["environment"], "git_commit": head}
    assert trace_record(Result.from_dict(record), checkout).state == TRACED
    record["evaluated_in"]["git_commit"] = "0000000"
    found = trace_record(Result.from_dict(record), checkout)
    assert found == Trace(UNTRACED, "evaluated again from: commit not in the repository")


def test_without_history_to_check_against_the_trace_is_unknown(checkout, tmp_path_factory):
    """Outside a git checkout, and in a shallow clone lacking the commit: unknown, not untraced; a tree's
    unstored changes are known without history."""
    first = git(checkout, "rev-parse", "--short", "HEAD")
    git(checkout, "commit", "-q", "--allow-empty", "-m", "next")
    shallow = tmp_path_factory.mktemp("shallow") / "clone"
    git(checkout, "clone", "-q", "--depth", "1", f"file://{checkout}", str(shallow))
    outside = tmp_path_factory.mktemp("outside")
    for folder in (shallow, outside):
        assert trace(Result.from_dict(record_with(first)).environment, folder).state == UNKNOWN
        assert trace(Result.from_dict(record_with(f"{first}+uncommitted")).environment, folder).state == UNTRACED


def test_phm_collect_marks_the_rows_of_an_untraced_record(checkout):
    """A committed record whose commit is rewritten to one missing from history: its row is marked in every
    table, the footnote names the list, and OUT.csv's traced column says no."""
    from phm_experiments.report import collect

    head = git(checkout, "rev-parse", "--short", "HEAD")
    write_runs(checkout / "runs", {"transformer": head, "phm_n4_lr008": "0000000"})
    collect(checkout / "runs", checkout / "report")
    report = (checkout / "report.md").read_text()
    assert f"| phm_n4_lr008 | 34.46 {MARK} |" in report  # the score table: the cell
    assert f"| runs | phm_n4_lr008 {MARK} | 1,493,504 |" in report  # every configuration's: the name
    assert f"| phm_n4_lr008@avg5 | 36.26 {MARK} |" in report and f"| phm_n4_lr008 {MARK} | runs | 34.46 |" in report
    assert "| transformer | 37.23 |" in report and "| runs | transformer | 2,180,096 |" in report
    assert f"transformer {MARK}" not in report
    assert FOOTNOTE in report and LIST_FILE in FOOTNOTE
    rows = {row["row"]: row for row in csv.DictReader(open(checkout / "report.csv"))}
    assert rows["phm_n4_lr008"]["traced"] == "no" and rows["transformer"]["traced"] == "yes"


def test_phm_collect_traced_only_leaves_the_untraced_runs_out(checkout, capsys):
    from phm_experiments.cli.collect import main

    head = git(checkout, "rev-parse", "--short", "HEAD")
    write_runs(checkout / "runs", {"transformer": head, "phm_n4_lr008": "0000000"})
    assert main([str(checkout / "runs"), "--out", str(checkout / "report"), "--traced-only"]) == 0
    error = capsys.readouterr().err
    assert "phm-collect: left out phm_n4_lr008/seed1 (--traced-only): commit not in the repository" in error
    rows = {row["row"]: row for row in csv.DictReader(open(checkout / "report.csv"))}
    assert list(rows) == ["transformer", "transformer@avg5"] and rows["transformer"]["traced"] == "yes"
    report = (checkout / "report.md").read_text()
    assert (
        "phm_n4_lr008 |" not in report
        and "Left out (--traced-only), their code not traced: phm_n4_lr008/seed1" in report
    )


def test_phm_collect_traced_only_refuses_a_folder_of_untraced_runs(checkout, capsys):
    from phm_experiments.cli.collect import main

    write_runs(checkout / "runs", {"transformer": "0000000"})
    with pytest.raises(SystemExit) as exit:
        main([str(checkout / "runs"), "--out", str(checkout / "report"), "--traced-only"])
    assert exit.value.code == 1 and "can be traced to its code (--traced-only)" in capsys.readouterr().err
    assert not (checkout / "report.md").exists()
