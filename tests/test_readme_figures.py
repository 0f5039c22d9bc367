"""The README's Results table holds what the committed records say: each row's seeds, parameters and
scores recomputed from results/runs as phm-collect averages them."""

import re
from pathlib import Path

import pytest

from phm_experiments.report.aggregate import load_results, run_rows

REPO = Path(__file__).resolve().parent.parent
RECORDS = REPO / "results" / "runs" / "converged" / "multi30k"
# the README's model column -> the config folder of its records
ROWS = {
    "Transformer (dense twin)": "transformer",
    "PHM-Transformer n=2": "phm_n2_lr008",
    "dense, PHM n=2's size (hidden 96, FFN 313)": "transformer_n2_params_lr008",
    "Quaternion Transformer": "quaternion_lr008",
    "dense, PHM n=4's size (hidden 64, FFN 267)": "transformer_equal_params_lr008",
    "PHM-Transformer n=4": "phm_n4_lr008",
    "PHM-Transformer n=16": "phm_n16_lr008",
    "PHM-Transformer n=8": "phm_n8_lr008",
}


def readme_results_table() -> dict:
    """{model: [parameters, seeds, BLEU, last 5 averaged]} of the README's Results table, bold and marks removed."""
    text = (REPO / "README.md").read_text(encoding="utf-8")
    section = text[text.index("## Results\n") : text.index("\n## ", text.index("## Results\n") + 1)]
    table = {}
    for line in section.splitlines():
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if len(cells) == 5 and cells[0] not in ("model", "---"):
            table[cells[0]] = [re.sub(r"\*\*|†", "", cell).strip() for cell in cells[1:]]
    return table


def shown(row) -> str:
    return f"{row.score:.2f}" + (f" ± {row.score_std:.2f}" if row.score_std is not None else "")


@pytest.mark.skipif(not RECORDS.is_dir(), reason="no committed records beside this checkout")
def test_every_figure_of_the_results_table_is_its_records():
    table = readme_results_table()
    assert set(table) == set(ROWS), "a row of the README's Results table without its records here, or the reverse"
    rows = {row.row: row for row in run_rows(load_results(RECORDS))}
    lines = (REPO / "README.md").read_text(encoding="utf-8").splitlines()
    for model, folder in ROWS.items():
        best, averaged = rows[folder], rows[f"{folder}@avg5"]
        expected = [f"{best.params_no_emb:,}", str(len(best.seeds.split())), shown(best), shown(averaged)]
        assert table[model] == expected, f"{model}: the README says {table[model]}, the records {expected}"
        untraced_mark = "†" in next(line for line in lines if line.startswith(f"| {model} |"))
        assert untraced_mark == best.untraced, f"{model}: the † mark and the records' traceability disagree"
