"""Config checks that keep a run from being silently wrong: a best-checkpoint metric kept the wrong way
round (a maximised loss, a minimised BLEU or accuracy), inherited or explicit; distillation options
that would corrupt the student's training data."""

import pytest
import yaml
from conftest import REPO, TINY, run_main

from phm_experiments.checks import check_all
from phm_experiments.cli import run as phm_run
from phm_experiments.config import ConfigError, load_config

BASE = {"data": "data-bin/x", "train": {"arch": "a"}, "evaluate": {"kind": "accuracy"}}


def write(path, values: dict):
    path.write_text(yaml.safe_dump(values, sort_keys=False))
    return path


def refused(path) -> str:
    with pytest.raises(ConfigError) as error:
        load_config(path)
    return str(error.value)


def test_a_loss_over_a_base_that_maximises_is_refused_naming_the_config_the_metric_and_the_key(tmp_path):
    # configs/table5/_sva.yaml keeps the highest accuracy; a variant that names only the loss kept the
    # checkpoint of the highest validation loss as checkpoint_best.pt
    loss = tmp_path / "sva_loss.yaml"
    loss.write_text(f"extends: {REPO / 'configs/table5/_sva.yaml'}\ntrain: {{arch: a, best-checkpoint-metric: loss}}\n")
    message = refused(loss)
    assert message.startswith(f"{loss}:\n")
    assert "train.best-checkpoint-metric loss with train.maximize-best-checkpoint-metric: true (set in " in message
    assert "_sva.yaml): fairseq would keep the checkpoint of the highest loss as checkpoint_best.pt" in message
    assert "set train.maximize-best-checkpoint-metric: false in sva_loss.yaml" in message
    out = run_main(phm_run.main, loss, "--runs-dir", tmp_path / "runs", check=False)
    assert out.returncode == 2 and "the highest loss" in out.stderr and "Traceback" not in out.stderr
    assert not (tmp_path / "runs").exists()
    # the fix the message gives passes
    loss.write_text(loss.read_text().replace("loss}", "loss, maximize-best-checkpoint-metric: false}"))
    assert load_config(loss).train["best-checkpoint-metric"] == "loss"


def test_every_wrong_direction_is_refused_and_the_right_ones_pass(tmp_path):
    base = write(tmp_path / "_base.yaml", {**BASE, "train": {"arch": "a", "maximize-best-checkpoint-metric": True}})
    cases = {
        # fairseq's default metric is the loss
        "default.yaml": ({"extends": "_base.yaml"}, "not set (fairseq's default: loss) with", "(set in _base.yaml)"),
        "nll.yaml": (
            {"extends": "_base.yaml", "train": {"best-checkpoint-metric": "nll_loss"}},
            "highest nll_loss",
            "",
        ),
        "ppl.yaml": (
            {**BASE, "train": {"arch": "a", "best-checkpoint-metric": "ppl", "maximize-best-checkpoint-metric": True}},
            "the highest ppl",
            "(set in ppl.yaml)",
        ),
        "bleu.yaml": ({**BASE, "train": {"arch": "a", "best-checkpoint-metric": "bleu"}}, "the lowest bleu", ""),
        "accuracy.yaml": (
            {**BASE, "train": {"arch": "a", "best-checkpoint-metric": "accuracy"}},
            "without train.maximize-best-checkpoint-metric: fairseq would keep the checkpoint of the lowest accuracy",
            "set train.maximize-best-checkpoint-metric: true in accuracy.yaml",
        ),
    }
    for name, (values, problem, more) in cases.items():
        message = refused(write(tmp_path / name, values))
        assert problem in message and more in message, message
    fine = {
        "accuracy_up.yaml": {"extends": "_base.yaml", "train": {"best-checkpoint-metric": "accuracy"}},
        "loss_down.yaml": {"extends": "_base.yaml", "train": {"maximize-best-checkpoint-metric": None}},
        "loss_plain.yaml": BASE,
    }
    for name, values in fine.items():
        assert load_config(write(tmp_path / name, values)), name
    assert base.exists()


def test_distill_options_that_would_corrupt_the_distilled_data_are_refused_each_by_name(tmp_path):
    """fairseq-generate's S- and H- lines become the student's training pairs: post-processed, detokenized
    or several per sentence, or of another split, they are not the training data's any more."""
    train = {"task": "translation", "arch": "transformer_twin_demo", "optimizer": "adam", "lr": 0.001, **TINY}
    common = {"data": "data-bin/not-prepared-yet", "train": train}
    evaluate = {"kind": "bleu", "reference": "{data}/test.tgt"}
    write(tmp_path / "teacher.yaml", {**common, "evaluate": evaluate})
    refused_options = {
        "gen-subset": "valid",
        "post-process": "sentencepiece",
        "remove-bpe": "subword_nmt",
        "nbest": 2,
        "tokenizer": "moses",
        "bpe": "subword_nmt",
    }
    student = {**common, "teacher": "teacher.yaml", "evaluate": evaluate}
    path = write(tmp_path / "student.yaml", {**student, "distill": {"beam": 4, **refused_options}})
    with pytest.raises(ConfigError) as error:
        check_all([path], tmp_path / "runs")
    lines = str(error.value).splitlines()
    assert lines[0] == f"{path}:"
    problems = [line.strip() for line in lines[1:] if line.strip().startswith("distill.")]
    assert [problem.split(":")[0] for problem in problems] == [f"distill.{key}" for key in refused_options]
    assert problems[2] == (
        "distill.remove-bpe: the teacher's outputs must stay in the training data's tokens (BPE and all); remove it"
    )
    assert "distill.nbest: one translation per sentence; remove it" in problems
    for key, value in refused_options.items():  # each alone is refused too
        write(path, {**student, "distill": {key: value}})
        with pytest.raises(ConfigError, match=f"distill.{key}: .*; remove it"):
            check_all([path], tmp_path / "runs")
    # search options pass, and so does a refused option set to false (false leaves an option out)
    write(path, {**student, "distill": {"beam": 4, "lenpen": 1.0, "nbest": False}})
    assert check_all([path], tmp_path / "runs")
