"""python -m phm_experiments.report.fit: training and validation loss at the best epoch against the dense
curve's, from the committed records."""

import json
import shutil
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
    assert phm["best_epochs"] == " / ".join(str(t.checkpoint_best_epoch) for t in trainings)
    valid = [t.curve["valid"][t.checkpoint_best_epoch - 1][1] for t in trainings]
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


def test_the_losses_with_dropout_off_are_shown_per_seed_where_measured(tmp_path):
    runs = tmp_path / "runs"
    for name in (*DENSE, PHM_N4):
        shutil.copytree(RUNS / name, runs / name)
    measured = {"losses": {"train": {"loss": 3.21}, "valid": {"loss": 4.43}}}
    (runs / PHM_N4 / "seed2" / "eval_losses.json").write_text(json.dumps(measured))
    out = tmp_path / "fit"
    main(["--runs-dir", str(runs), "--out", str(out), "--dense", *DENSE, "--point", "PHM n=4", PHM_N4])
    result = json.loads(Path(f"{out}.json").read_text())
    training = Result.read(RUNS / PHM_N4 / "seed2" / "result.json").training
    on = epochs(training)[training.checkpoint_best_epoch - 1]["train"]
    assert result["points"]["PHM n=4"]["dropout_off"] == [
        {"seed": 2, "epoch": training.checkpoint_best_epoch, "train_dropout_on": on, "train": 3.21, "valid": 4.43}
    ]
    assert all(dense["dropout_off"] == [] for dense in result["dense"])
    table = Path(f"{out}.md").read_text()
    assert f"| PHM n=4 | {PHM_N4} | 2 | {training.checkpoint_best_epoch} | {on:.3f} | 3.210 | 4.430 | 1.220 |" in table
    # none measured: no such section
    (runs / PHM_N4 / "seed2" / "eval_losses.json").unlink()
    main(["--runs-dir", str(runs), "--out", str(out), "--dense", *DENSE, "--point", "PHM n=4", PHM_N4])
    assert "With dropout off" not in Path(f"{out}.md").read_text()


def test_the_best_epoch_is_that_of_checkpoint_best_pt_which_a_tie_moves_to_the_later_epoch():
    # valid BLEU 37.48 at epochs 16 and 17: early stopping counts from 16, fairseq saved checkpoint_best.pt at 17
    training = Result.read(RUNS / "converged/multi30k_iwslt/transformer_equal_params/seed1/result.json").training
    bleu = [score for _, score in training.curve["valid_bleu"]]
    assert bleu[15] == bleu[16] == training.best_valid == max(bleu)
    assert (training.best_epoch, training.checkpoint_best_epoch) == (16, 17)
    phm = Result.read(RUNS / PHM_N4 / "seed1" / "result.json").training  # no tie: the same epoch
    assert phm.checkpoint_best_epoch == phm.best_epoch is not None
