"""The seed-paired report (phm_experiments.report.paired) on copies of committed records of converged runs."""

import json
import shutil
import statistics
from pathlib import Path

import pytest

from phm_experiments.report.paired import main
from phm_experiments.results import Result

RUNS = Path(__file__).parent.parent / "results/runs/converged/multi30k"
MODEL, REFERENCE = "quaternion_lr008", "transformer_equal_params_lr008"  # 3 seeds each, one machine


@pytest.fixture
def runs(tmp_path) -> Path:
    """The two configs' committed records, copied (checkpoints are not committed: only result.json)."""
    for name in (MODEL, REFERENCE):
        for file in (RUNS / name).glob("seed*/result.json"):
            target = tmp_path / "runs" / "size" / name / file.parent.name / "result.json"
            target.parent.mkdir(parents=True)
            shutil.copy(file, target)
    return tmp_path / "runs"


def report(runs: Path, out: Path) -> dict:
    main(["--runs-dir", str(runs), "--runs", "size", "--against", REFERENCE, "--models", MODEL, "--out", str(out)])
    return json.loads(Path(f"{out}.json").read_text())


def edit(runs: Path, name: str, seed: int, **environment) -> None:
    path = runs / "size" / name / f"seed{seed}" / "result.json"
    data = json.loads(path.read_text())
    data["environment"].update(environment)
    path.write_text(json.dumps(data))


def scores(name: str) -> dict:
    results = [Result.read(file) for file in sorted((RUNS / name).glob("seed*/result.json"))]
    return {r.seed: (r.evaluation.score, r.averaged_evaluation.score, r.training.best_valid) for r in results}


def test_each_gap_is_the_model_minus_the_reference_of_its_own_seed(runs, tmp_path):
    result = report(runs, tmp_path / "paired")
    (pair,) = result["pairs"]
    model, reference = scores(MODEL), scores(REFERENCE)
    assert sorted(pair["gaps"]) == ["1", "2", "3"] and pair["left_out"] == {}
    for i, key in enumerate(("test_best", "test_last", "valid_best")):
        gaps = [round(model[seed][i] - reference[seed][i], 2) for seed in (1, 2, 3)]
        assert [pair["gaps"][str(seed)][key] for seed in (1, 2, 3)] == gaps
        assert pair["summary"][key] == {
            "mean": round(statistics.fmean(gaps), 2),
            "sd": round(statistics.stdev(gaps), 2),  # the sample standard deviation (n - 1)
            "n": 3,
        }
        assert pair["ahead"][key] == sum(gap > 0 for gap in gaps)
    assert result["models"][MODEL]["test_best"]["mean"] == round(statistics.fmean(s[0] for s in model.values()), 2)
    text = (tmp_path / "paired.md").read_text()
    gaps = [round(model[seed][0] - reference[seed][0], 2) for seed in (1, 2, 3)]
    assert f"| {MODEL} | {REFERENCE} | 1 2 3 (3) | {' / '.join(f'{g:+.2f}' for g in gaps)} |" in text
    assert (tmp_path / "paired.png").stat().st_size > 10_000


def test_a_seed_trained_apart_or_untraceable_is_left_out_with_the_reason(runs, tmp_path):
    edit(runs, MODEL, 2, device="Intel(R) Xeon(R) Processor")
    edit(runs, REFERENCE, 3, git_commit="not-a-commit")
    shutil.rmtree(runs / "size" / MODEL / "seed1")
    (pair,) = report(runs, tmp_path / "paired")["pairs"]
    assert pair["gaps"] == {}
    assert pair["left_out"]["1"] == f"no run of {MODEL}"
    assert pair["left_out"]["2"] == "trained apart: device Intel(R) Xeon(R) Processor vs AMD EPYC"
    assert pair["left_out"]["3"] == "a record whose code cannot be traced"
    assert pair["summary"]["test_best"] == {"mean": None, "sd": None, "n": 0}


def test_a_model_without_runs_is_named_and_a_reference_without_runs_refused(runs, tmp_path, capsys):
    out = tmp_path / "paired"
    main(
        [
            "--runs-dir",
            str(runs),
            "--runs",
            "size",
            "--against",
            REFERENCE,
            "--models",
            MODEL,
            "none",
            "--out",
            str(out),
        ]
    )
    assert json.loads(Path(f"{out}.json").read_text())["without_runs"] == ["none"]
    assert "Without a finished run, left out: none." in Path(f"{out}.md").read_text()
    with pytest.raises(SystemExit) as exit:
        main(["--runs-dir", str(runs), "--runs", "size", "--against", "none", "--models", MODEL]
             + ["--out", str(tmp_path / "refused")])  # fmt: skip
    error = capsys.readouterr().err
    assert exit.value.code == 2 and "--against none: " in error and "size/none has no finished run" in error
    assert not list(tmp_path.glob("refused*"))
