"""python -m phm_experiments.report.frontier: models against the dense curve, from the committed records."""

import json
from pathlib import Path

import pytest

from phm_experiments.report.frontier import main, on_curve

RUNS = Path(__file__).resolve().parent.parent / "results" / "runs"


def test_the_curve_is_read_linearly_in_log_parameters_and_only_within_its_range():
    curve = [{"params_no_emb": 100, "best": 30.0}, {"params_no_emb": 10_000, "best": 34.0}]
    assert on_curve(curve, 1_000, "best") == 32.0  # halfway in log parameters
    assert on_curve(curve, 99, "best") == 30.0  # a few weights off an end: the end's
    assert on_curve(curve, 50, "best") is None and on_curve(curve, 20_000, "best") is None


def test_each_model_is_set_against_the_dense_curve_at_its_size(tmp_path):
    out = tmp_path / "frontier"
    dense = ["converged/multi30k/transformer_equal_params_lr008", "converged/multi30k/transformer"]
    main(
        [
            "--runs-dir",
            str(RUNS),
            "--out",
            str(out),
            "--dense",
            *dense,
            "--point",
            "PHM n=4",
            "converged/multi30k/phm_n4_lr008",
        ]
    )
    result = json.loads(Path(f"{out}.json").read_text())
    phm = result["points"]["PHM n=4"]
    assert (phm["best"], phm["above_best"]) == (34.97, round(34.97 - 35.99, 2))
    assert [p["params_no_emb"] for p in result["dense"]] == [239_148, 925_696]
    table = Path(f"{out}.md").read_text()
    last = round(phm["last"] - result["dense"][0]["last"], 2)  # at the curve's lower end, 44 weights below it
    assert phm["above_last"] == last
    assert (
        f"| PHM n=4 | converged/multi30k/phm_n4_lr008 | 239,104 | 1 2 3 | 34.97 ± 0.60 | -1.02 | {phm['last']:.2f}"
        in table
    )
    assert "AMD EPYC" in table and "yes / no / yes †" in table  # its seed 2 cannot be traced
    assert Path(f"{out}.png").stat().st_size > 0


def test_a_run_without_a_record_is_named(tmp_path, capsys):
    with pytest.raises(SystemExit) as stop:
        main(["--runs-dir", str(RUNS), "--out", str(tmp_path / "f"), "--dense", "converged/multi30k/no_such_run"])
    assert stop.value.code == 2 and "no_such_run: no finished run" in capsys.readouterr().err
