"""python -m phm_experiments.report.fit: training and validation loss at the best epoch against the dense
curve's, from the committed records."""

import json
from pathlib import Path

import pytest

from phm_experiments.report.fit import epochs, loses_on, main
from phm_experiments.results import Result

RUNS = Path(__file__).resolve().parent.parent / "results" / "runs"
PHM_N4 = "converged/multi30k/phm_n4_lr008"
DENSE = ["converged/multi30k/transformer_equal_params_lr008", "converged/multi30k/transformer"]


def test_an_epochs_training_loss_is_the_mean_of_the_points_logged_during_it():
    training = Result.read(RUNS / PHM_N4 / "seed1" / "result.json").training
    training.curve = {"train": [[10, 6.0], [20, 4.0], [30, 3.0], [40, 2.0]], "valid": [[20, 5.5], [40, 4.5]]}
    assert epochs(training) == [
        {"epoch": 1, "train": 5.0, "valid": 5.5},
        {"epoch": 2, "train": 2.5, "valid": 4.5},
    ]


@pytest.mark.parametrize(
    "train, valid, reading",
    [(-0.3, 0.1, "generalisation"), (0.2, 0.1, "fit"), (0.2, -0.1, "neither"), (None, 0.1, "")],
)
def test_the_reading_against_the_dense_curve(train, valid, reading):
    assert loses_on({"train_loss_above": train, "valid_loss_above": valid}).startswith(reading)


def test_phm_n4_fits_better_than_the_dense_model_of_its_size_and_validates_worse(tmp_path):
    out = tmp_path / "fit"
    main(["--runs-dir", str(RUNS), "--out", str(out), "--dense", *DENSE, "--point", "PHM n=4", PHM_N4])
    result = json.loads(Path(f"{out}.json").read_text())
    phm, (small, twin) = result["points"]["PHM n=4"], result["dense"]
    # each seed's validation loss at the end of its best epoch, read from its record
    trainings = [Result.read(RUNS / PHM_N4 / f"seed{s}" / "result.json").training for s in (1, 2, 3)]
    assert phm["best_epochs"] == " / ".join(str(t.best_epoch) for t in trainings)
    valid = [t.curve["valid"][t.best_epoch - 1][1] for t in trainings]
    assert phm["valid_loss"] == pytest.approx(sum(valid) / 3, abs=1e-3)
    # 44 weights below the curve's lower end: read there
    assert phm["train_loss_above"] == pytest.approx(phm["train_loss"] - small["train_loss"], abs=1e-3)
    assert phm["train_loss_above"] < 0 < phm["valid_loss_above"]
    assert phm["loses_on"].startswith("generalisation")
    assert twin["train_loss"] < small["train_loss"]  # the wider dense model fits its data better
    # the dense models' band: each dense model on it, PHM n=4's epochs well above it
    band = result["band"]
    assert band["epochs"] == sum(dense["band_epochs"] for dense in result["dense"])
    assert all(abs(dense["above_band"]) < 2 * band["residual_sd"] for dense in result["dense"])
    assert phm["above_band"] > 3 * band["residual_sd"] and phm["band_epochs"] > 0
    table = Path(f"{out}.md").read_text()
    assert "| PHM n=4 | converged/multi30k/phm_n4_lr008 | 239,104 | 1 2 3 |" in table and "yes / no / yes †" in table
    assert Path(f"{out}.png").stat().st_size > 0


def test_a_run_without_a_record_is_named_and_nothing_is_written(tmp_path, capsys):
    out = tmp_path / "fit"
    with pytest.raises(SystemExit) as stop:
        main(["--runs-dir", str(RUNS), "--out", str(out), "--dense", *DENSE, "--point", "x", "converged/no_such_run"])
    assert stop.value.code == 2 and "no_such_run: no finished run" in capsys.readouterr().err
    assert not list(tmp_path.iterdir())
