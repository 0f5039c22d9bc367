"""The gap-against-width report (phm_experiments.report.width) on committed records of converged runs."""

import json
import shutil
from pathlib import Path

import pytest

from phm_experiments.report.width import main
from phm_experiments.results import Result

RUNS = Path(__file__).parent.parent / "results/runs"


def scores(config: str, averaged: bool) -> list[float]:
    """Each seed's test BLEU of a committed run: the best checkpoint's, or the last checkpoints' average."""
    results = [Result.read(file) for file in sorted((RUNS / config).glob("seed*/result.json"))]
    return [result.averaged_evaluation.score if averaged else result.evaluation.score for result in results]


def mean(values):
    return sum(values) / len(values)


def test_the_gaps_are_each_series_mean_minus_the_dense_twins_at_its_width(tmp_path):
    twin, phm = "converged/multi30k/transformer", "converged/multi30k/phm_n4_lr008"
    main(["--out", str(tmp_path / "w"), "--hidden", "128", "--dense", twin, "--series", "PHM n=4", phm])
    result = json.loads((tmp_path / "w.json").read_text())
    point = result["series"]["PHM n=4"][0]
    for key, averaged in (("best", False), ("last", True)):
        model, dense = scores(phm, averaged), scores(twin, averaged)
        assert len(model) == len(dense) == 3
        assert point[key] == round(mean(model), 2)
        assert point[f"gap_{key}"] == pytest.approx(round(mean(model), 2) - round(mean(dense), 2), abs=0.006)
    assert "| 128 | PHM n=4 | converged/multi30k/phm_n4_lr008 | 1 2 3 |" in (tmp_path / "w.md").read_text()
    assert (tmp_path / "w.png").stat().st_size > 10_000


def test_a_width_without_the_series_run_leaves_its_point_out(tmp_path):
    runs = tmp_path / "runs"
    for config in ("a/transformer", "a/phm_n4_lr008", "b/transformer"):
        shutil.copytree(RUNS / "converged/multi30k" / Path(config).name, runs / config)
    main(
        ["--runs-dir", str(runs), "--out", str(tmp_path / "w"), "--hidden", "128", "256"]
        + ["--dense", "a/transformer", "b/transformer", "--series", "PHM n=4", "a/phm_n4_lr008", "b/phm_n4"]
    )
    result = json.loads((tmp_path / "w.json").read_text())
    assert result["series"]["PHM n=4"][1] is None and result["series"]["PHM n=4"][0]["gap_best"] == -2.31


@pytest.mark.parametrize(
    "args, message",
    [
        (["--dense", "converged/multi30k/transformer"], "2 widths"),
        (["--dense", "converged/multi30k/transformer", "converged/none"], "hidden 256: the dense twin"),
    ],
)
def test_runs_that_do_not_match_the_widths_are_refused(tmp_path, capsys, args, message):
    with pytest.raises(SystemExit) as exit:
        main(["--out", str(tmp_path / "w"), "--hidden", "128", "256", *args, "--series", "x", "a", "b"])
    assert exit.value.code == 2 and message in capsys.readouterr().err
    assert not (tmp_path / "w.md").exists()


def test_accuracy_runs_are_labelled_by_their_metric_not_as_bleu(tmp_path, monkeypatch):
    from matplotlib.figure import Figure

    labels, save = [], Figure.savefig

    def savefig(figure, *args, **kwargs):  # the plot's score axis, as drawn
        labels.append(figure.axes[0].get_ylabel())
        return save(figure, *args, **kwargs)

    monkeypatch.setattr(Figure, "savefig", savefig)
    twin, phm = "converged/sva/transformer", "converged/sva/phm_n4"
    main(["--out", str(tmp_path / "w"), "--hidden", "128", "--dense", twin, "--series", "PHM n=4", phm])
    text = (tmp_path / "w.md").read_text()
    assert "Accuracy on the test set" in text and "chosen on validation accuracy" in text and "BLEU" not in text
    assert json.loads((tmp_path / "w.json").read_text())["metric"] == "accuracy"
    assert labels == ["accuracy minus the dense twin's"]


def test_runs_of_different_metrics_are_refused(tmp_path, capsys):
    args = ["--out", str(tmp_path / "w"), "--hidden", "128", "--dense", "converged/multi30k/transformer"]
    with pytest.raises(SystemExit) as exit:
        main([*args, "--series", "x", "converged/sva/phm_n4"])
    assert (
        exit.value.code == 2 and "the runs are scored by accuracy and bleu, not one metric" in capsys.readouterr().err
    )
    assert not list(tmp_path.iterdir())


@pytest.mark.parametrize(
    "args, message",
    [
        (["--hidden", "-1"], "--hidden -1: the widths are sizes above 0, each given once"),
        (["--hidden", "0"], "--hidden 0: the widths are sizes above 0"),
        (["--hidden", "128", "128"], "--hidden 128 128: the widths are sizes above 0, each given once"),
        (["--hidden", "128", "--series", "x", "a"], "--series x: a label given twice"),
        (["--hidden", "128", "--out", "FILE/w"], "is a file, not a folder"),
    ],
)
def test_arguments_are_checked_before_anything_is_written(tmp_path, capsys, args, message):
    # --hidden -1 wrote OUT.md and OUT.json, then failed while plotting on its log scale
    (tmp_path / "FILE").write_text("")
    args = [str(tmp_path / "FILE/w") if a == "FILE/w" else a for a in args]
    twin = "converged/multi30k/transformer"
    with pytest.raises(SystemExit) as exit:
        main(["--out", str(tmp_path / "w"), "--dense", twin, "--series", "x", twin, *args])
    assert exit.value.code == 2 and message in capsys.readouterr().err
    assert [path.name for path in tmp_path.iterdir()] == ["FILE"]
