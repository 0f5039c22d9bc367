"""The README's figures are their records': each row of the Results table (seeds, parameters and scores
recomputed from results/runs as phm-collect averages them), and each Benchmarks line (a committed report
under benchmarks/results, with the CPU, threads, date and commit that report records)."""

import json
import re
import subprocess
from pathlib import Path

import pytest

from phm_experiments.report.aggregate import load_results, run_rows

REPO = Path(__file__).resolve().parent.parent
CONVERGED = REPO / "results" / "runs" / "converged"
# each table of the README's Results section, in order: its records' folder, and its model column -> the
# config folder of its records
TABLES = [
    (
        CONVERGED / "multi30k",
        {
            "Transformer (dense twin)": "transformer",
            "PHM-Transformer n=2": "phm_n2_lr008",
            "dense, PHM n=2's size (hidden 96, FFN 313)": "transformer_n2_params_lr008",
            "Quaternion Transformer": "quaternion_lr008",
            "dense, PHM n=4's size (hidden 64, FFN 267)": "transformer_equal_params_lr008",
            "PHM-Transformer n=4": "phm_n4_lr008",
            "PHM-Transformer n=16": "phm_n16_lr008",
            "PHM-Transformer n=8": "phm_n8_lr008",
        },
    ),
    (
        CONVERGED / "multi30k_iwslt",
        {
            "Transformer (dense twin)": "transformer",
            "PHM-Transformer n=2": "phm_n2_lr004",
            "dense, PHM n=4's size (hidden 128, FFN 521)": "transformer_equal_params",
            "PHM-Transformer n=4": "phm_n4",
            "Quaternion Transformer": "quaternion",
        },
    ),
]


def readme_results_tables() -> list[dict]:
    """Each table of the README's Results section as {model: [parameters, seeds, BLEU, last 5 averaged]},
    bold and marks removed, and the lines of each."""
    text = (REPO / "README.md").read_text(encoding="utf-8")
    section = text[text.index("## Results\n") : text.index("\n## ", text.index("## Results\n") + 1)]
    tables, table = [], None
    for line in section.splitlines():
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if not line.startswith("|"):
            table = None
        elif len(cells) == 5 and cells[0] not in ("model", "---"):
            if table is None:
                table = {"rows": {}, "lines": {}}
                tables.append(table)
            table["rows"][cells[0]] = [re.sub(r"\*\*|†", "", cell).strip() for cell in cells[1:]]
            table["lines"][cells[0]] = line
    return tables


def shown(row) -> str:
    return f"{row.score:.2f}" + (f" ± {row.score_std:.2f}" if row.score_std is not None else "")


@pytest.mark.skipif(not CONVERGED.is_dir(), reason="no committed records beside this checkout")
def test_every_figure_of_the_results_tables_is_its_records():
    tables = readme_results_tables()
    assert len(tables) == len(TABLES), f"the README's Results section has {len(tables)} tables, not {len(TABLES)}"
    for table, (records, models) in zip(tables, TABLES):
        assert set(table["rows"]) == set(models), (
            f"{records.name}: a row of the README without its records, or the reverse"
        )
        rows = {row.row: row for row in run_rows(load_results(records))}
        for model, folder in models.items():
            best, averaged = rows[folder], rows[f"{folder}@avg5"]
            expected = [f"{best.params_no_emb:,}", str(len(best.seeds.split())), shown(best), shown(averaged)]
            assert table["rows"][model] == expected, (
                f"{model}: the README says {table['rows'][model]}, the records {expected}"
            )
            untraced_mark = "†" in table["lines"][model]
            assert untraced_mark == best.untraced, f"{model}: the † mark and the records' traceability disagree"


def readme_section(title: str) -> str:
    text = (REPO / "README.md").read_text(encoding="utf-8")
    start = text.index(f"## {title}\n")
    end = text.find("\n## ", start + 1)
    return text[start : end if end != -1 else len(text)]


def committed(path: str) -> bool:
    """A file, or a folder holding files, that git tracks in this checkout."""
    listed = subprocess.run(["git", "ls-files", "--", path], cwd=REPO, capture_output=True, text=True, check=True)
    return bool(listed.stdout.strip())


def report_labels(path: str) -> list:
    """(CPU, threads, date, commit) of each report at ``path``: a benchmark's .md (its .json beside it)
    or a folder of GPU runs (each run's report.json)."""
    target = REPO / path
    if target.is_dir():
        labels = []
        for report in sorted(target.glob("*/report.json")):
            run = json.loads(report.read_text())
            benchmarks = run["parts"].get("benchmarks", {}).get("reports", {})
            threads = {env["environment"]["threads"] for env in benchmarks.values()}
            cpu = run["machine"]["cpu"].split("(")[0].strip()  # "Intel(R) Xeon(R) Processor" -> "Intel"
            labels.append((cpu, threads, run["started"][:10], run["machine"]["git_commit"]))
        return labels
    environment = json.loads(target.with_suffix(".json").read_text())["environment"]
    cpu = environment["device"].split("(")[0].strip()
    return [(cpu, {environment["threads"]}, environment["date"][:10], environment["git_commit"])]


@pytest.mark.skipif(not (REPO / ".git").exists(), reason="not a git checkout")
def test_every_benchmark_line_cites_a_committed_report_and_its_labels():
    """Each line of the README's Benchmarks cites a report that git tracks under benchmarks/results, and
    names the CPU, thread count, date and commit that the report records."""
    lines = [line for line in readme_section("Benchmarks").splitlines() if line.startswith("- ")]
    assert len(lines) == 5, lines
    for line in lines:
        cited = re.findall(r"\]\((benchmarks/results/[^)\s]+)\)", line)
        assert cited, f"a benchmark line that cites no report under benchmarks/results: {line}"
        for path in cited:
            assert committed(path.rstrip("/")), f"{path}: not a committed report"
            for cpu, threads, date, commit in report_labels(path.rstrip("/")):
                assert cpu in line, f"{path}: the report's CPU ({cpu}) is not named: {line}"
                counts = {int(count) for count in re.findall(r"(\d+) threads?\b", line)}
                assert counts == threads, f"{path}: the report ran at {sorted(threads)} threads: {line}"
                assert date in line, f"{path}: the report's date ({date}) is not named: {line}"
                assert commit in line, f"{path}: the report's commit ({commit}) is not named: {line}"


def test_the_budget_sections_figures_are_in_the_reports_it_cites():
    section = readme_section("What a parameter budget buys")
    cited = re.findall(r"\]\((results/[^)#]+\.md)", section)
    assert cited, "the section cites no report of results/"
    reports = "".join((REPO / path).read_text(encoding="utf-8") for path in cited)
    for figure in re.findall(r"[+-]?\d+\.\d+", section):
        assert figure in reports, f"the README's {figure} is in none of {cited}"
