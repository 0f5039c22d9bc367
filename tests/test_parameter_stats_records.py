"""phm-run's records of --log-parameter-stats and of the validation BLEU (phm_experiments.logs.TrainingLog.curve)."""

import json
import shutil
from pathlib import Path

import pytest

from phm_experiments.logs import TrainingLog

RECORDS = Path(__file__).parent.parent / "results/runs/converged"


def line(tag, **stats):
    return f"2026-11-27 03:00:00 | INFO | {tag} | {json.dumps({k: str(v) for k, v in stats.items()})}"


def test_the_curve_holds_the_validation_bleu_and_the_epoch_averages_of_the_parameter_statistics():
    text = "\n".join(
        [
            line("train_inner", epoch=1, num_updates=5, loss=9.0, gnorm_rule=0.5, update_rule=0.001),
            line("valid", epoch=1, valid_loss=8.0, valid_bleu=3.5, valid_num_updates=10),
            line("train", epoch=1, train_loss=8.5, train_num_updates=10, train_gnorm_rule=0.4),
            line("train", epoch=1, train_update_rule=0.002, train_num_updates=10, train_pnorm_factor=28.0),
            line("valid", epoch=2, valid_loss=7.0, valid_bleu=9.25, valid_num_updates=20),
            line("train", epoch=2, train_num_updates=20, train_gnorm_rule=0.3, train_update_rule=0.003),
        ]
    )
    curve = TrainingLog.parse(text).curve()
    assert curve["valid_bleu"] == [[10, 3.5], [20, 9.25]]
    # the epoch summaries' averages, not the inner records'; a key logged twice for an update: the last
    assert curve["gnorm_rule"] == [[10, 0.4], [20, 0.3]]
    assert curve["update_rule"] == [[10, 0.002], [20, 0.003]] and curve["pnorm_factor"] == [[10, 28.0]]
    assert set(curve) == {"train", "valid", "valid_bleu", "gnorm_rule", "update_rule", "pnorm_factor"}


def test_a_log_without_them_has_the_curves_it_always_had():
    text = (
        line("train_inner", epoch=1, num_updates=5, loss=9.0)
        + "\n"
        + line("valid", valid_loss=8.0, valid_num_updates=5)
    )
    assert TrainingLog.parse(text).curve() == {"train": [[5, 9.0]], "valid": [[5, 8.0]]}


def test_phm_collect_reports_the_diagnostics_of_runs_that_logged_them(tmp_path):
    """A committed record, given the curves of a run with --log-parameter-stats: the report's section and plot."""
    from phm_experiments.report import collect

    source = RECORDS / "multi30k"
    for config, rule_update in (("transformer", None), ("phm_n4_lr008", 0.001)):
        record = json.loads((source / config / "seed1/result.json").read_text())
        curve = record["training"]["curve"]
        curve["valid_bleu"] = [[128, 10.0], [256, 20.0], [384, 18.0], [512, 21.0]]
        curve["update_factor"] = [[128, 0.004], [256, 0.002], [384, 0.002], [512, 0.002]]
        if rule_update:
            curve["update_rule"] = [[n, rule_update] for n, _ in curve["update_factor"]]
            curve["gnorm_rule"] = [[n, 0.1] for n, _ in curve["update_factor"]]
            # PHYDI's gates as logged before the update was bounded: epoch 1 divided by their zero norm
            curve["update_gate"] = [[128, 6.5e27], [256, 0.02], [384, 0.01], [512, 0.03]]
        run = tmp_path / "runs" / config / "seed1"
        run.mkdir(parents=True)
        (run / "result.json").write_text(json.dumps(record))
    collect(tmp_path / "runs", tmp_path / "report")
    report = (tmp_path / "report.md").read_text()
    section = report[report.index("## Training diagnostics") :]
    # the plateau starts at 20 (the first at 90% of the best, 21): moves 2, 3, mean 2.50, largest 3.00 (the
    # climb from 10 left out); the factors' mean update 2.50e-03; the rules' 1.00e-03: 0.40; the gates' 2.00e-02,
    # the epoch above the measure's bound of 2 left out
    assert "| phm_n4_lr008 | 1 | 2.50 | 3.00 | 1.00e-03 | 2.50e-03 | 2.00e-02 | 0.40 |" in section
    assert "| transformer | 1 | 2.50 | 3.00 |  | 2.50e-03 |  |  |" in section
    assert (tmp_path / "report.parameters.png").stat().st_size > 10_000


def test_the_diagnostics_plot_keeps_the_rows_and_seeds_it_is_given(tmp_path, capsys):
    """`python -m phm_experiments.report.diagnostics RUNS --rows R --seeds S`: those rows and seeds alone."""
    from phm_experiments.report import diagnostics

    for run in ("transformer/seed1", "transformer/seed2", "phm_n4/seed1"):  # committed records, as they are
        (tmp_path / "runs" / run).mkdir(parents=True)
        shutil.copy(RECORDS / "multi30k_recipe" / run / "result.json", tmp_path / "runs" / run)
    plot = tmp_path / "stats.png"
    diagnostics.main([str(tmp_path / "runs"), "--rows", "transformer", "phm_n4", "--seeds", "1", "--out", str(plot)])
    rows = [line.split(" | ")[:2] for line in capsys.readouterr().out.splitlines() if line.startswith("| ")]
    assert rows[1:] == [["| transformer", "1"], ["| phm_n4", "1"]]  # after the header
    assert plot.stat().st_size > 10_000


def test_the_diagnostics_plot_says_which_rows_and_seeds_match_nothing_and_checks_out_first(tmp_path, capsys):
    """--rows or --seeds that no run has are named with those there are (not "no run logged parameter
    statistics"); --out into a missing folder makes it, and an --out that cannot be written is refused first."""
    from phm_experiments.report import diagnostics

    for run in ("transformer/seed1", "transformer/seed2", "phm_n4/seed1"):
        (tmp_path / "runs" / run).mkdir(parents=True)
        shutil.copy(RECORDS / "multi30k_recipe" / run / "result.json", tmp_path / "runs" / run)
    runs, plot = str(tmp_path / "runs"), tmp_path / "stats.png"
    for args, problem in (
        (["--rows", "phm_n9"], f"--rows phm_n9: no such row below {runs}; its rows: transformer, phm_n4"),
        (["--seeds", "7"], f"--seeds 7: no such run; the runs below {runs} have seeds 1, 2"),
        (["--rows", "phm_n4", "--seeds", "2"], "--seeds 2: no such run; the runs of phm_n4 have seeds 1"),
        (["--out", str(tmp_path / "stats.txt")], "--out"),
        (["--out", str(tmp_path / "runs/phm_n4/seed1/result.json/stats.png")], "result.json is a file, not a folder"),
    ):
        with pytest.raises(SystemExit) as stop:
            diagnostics.main([runs, "--out", str(plot), *args])
        assert stop.value.code == 2 and problem in capsys.readouterr().err
    assert not plot.exists()
    nested = tmp_path / "new" / "folder" / "stats.png"  # made, not a traceback after the work
    diagnostics.main([runs, "--rows", "phm_n4", "--out", str(nested)])
    assert nested.stat().st_size > 10_000 and "| phm_n4 | 1 |" in capsys.readouterr().out
