"""Training to convergence with phm-run on a tiny copy task: fairseq's --patience and its batches, exact
across a resume (phm_experiments.fairseq_train), and the average of the last epoch checkpoints."""

import os
import sys

import pytest
import sacrebleu
import torch
import yaml
from conftest import TINY_TRAIN, copy_task_files, run_command, run_main, slow, tiny_config

from phm_experiments.averaging import AveragingError, average_checkpoints, last_epoch_checkpoints, same_tensor
from phm_experiments.cli import collect as phm_collect
from phm_experiments.cli import run as phm_run
from phm_experiments.fairseq_train import early_stopping_state, training_arguments
from phm_experiments.kernels import pinned_environment
from phm_experiments.logs import TrainingLog
from phm_experiments.results import Result

PATIENCE = 2


@pytest.fixture(scope="module")
@slow
def data(tmp_path_factory):
    """Training pairs copy their source; validation pairs do not (their targets are other random
    strings), so the validation loss falls, then rises as the model learns to copy: early stopping
    has something to stop, within a few epochs."""
    raw = tmp_path_factory.mktemp("early_stopping")
    return {"raw": raw, "bin": copy_task_files(raw, {"train": 300, "valid": 40, "test": 30}, ("train", "test"))}


# the training of every test here: a tiny PHM Transformer, early stopping, the last 3 epochs kept
TRAINING = {
    **TINY_TRAIN,
    "arch": "phm_transformer_demo",
    "phm-n": 2,
    "max-epoch": 40,
    "patience": PATIENCE,
    "keep-last-epochs": 3,
}


def training_options(data_bin, save_dir, max_epoch) -> list:
    options = {**TRAINING, "max-epoch": max_epoch, "log-format": "json", "save-dir": save_dir, "seed": 1}
    args = [str(data_bin)]
    for key, value in options.items():
        args += [f"--{key}"] + ([] if value is True else [str(value)])
    return args


def launch(*args):
    """The training launcher, its kernels pinned as phm-run pins them: the same bits in every process."""
    import phm_fairseq

    module = ("-m", "phm_experiments.fairseq_train")
    env = {**os.environ, **pinned_environment(1)}
    return run_command(sys.executable, *module, *args, "--user-dir", phm_fairseq.__path__[0], env=env)


def validations(output: str) -> dict:
    return TrainingLog.parse(output).validations("loss")


@pytest.fixture(scope="module")
def uninterrupted(data, tmp_path_factory):
    save_dir = tmp_path_factory.mktemp("uninterrupted")
    out = launch(*training_options(data["bin"], save_dir, 40))
    return {"dir": save_dir, "log": TrainingLog.parse(out.stdout + out.stderr)}


def test_patience_stops_the_training_before_max_epoch(uninterrupted):
    log = uninterrupted["log"]
    scores = log.validations("loss")
    best = log.best_epoch("loss", maximize=False)
    last = max(scores)
    assert log.stopped_early and log.done
    assert last < 40 and last == best + PATIENCE  # stopped PATIENCE validations after the best one
    assert all(scores[epoch] >= scores[best] for epoch in range(best + 1, last + 1))
    state = early_stopping_state(uninterrupted["dir"] / "checkpoint_last.pt")
    assert state == {"best": pytest.approx(state["best"]), "num_runs": PATIENCE}
    # the count is of fairseq's unrounded loss; the log prints it to 3 decimals
    assert state["best"] == pytest.approx(scores[best], abs=5e-4)


def test_a_resumed_training_counts_on_from_its_checkpoint(data, uninterrupted, tmp_path):
    """Interrupted one validation after the best (the patience count at 1) and resumed: fairseq alone
    would count again from the resumed epoch's score, so it could stop PATIENCE validations after the
    resume at the earliest, and would train the later epochs on other batches; resumed by the launcher,
    the training stops PATIENCE validations after the best of both processes, with the parameters of
    the uninterrupted training, to the bit."""
    log = uninterrupted["log"]
    best = log.best_epoch("loss", maximize=False)
    first = launch(*training_options(data["bin"], tmp_path, best + 1))
    history = validations(first.stdout + first.stderr)
    assert history == {epoch: score for epoch, score in log.validations("loss").items() if epoch <= best + 1}
    state = early_stopping_state(tmp_path / "checkpoint_last.pt")
    assert state == {"best": pytest.approx(history[best], abs=5e-4), "num_runs": 1}

    second = launch(*training_options(data["bin"], tmp_path, 40))
    resumed = TrainingLog.parse(second.stdout + second.stderr)
    assert resumed.resumed_from_updates > 0 and resumed.stopped_early
    history |= resumed.validations("loss")
    overall_best = min(history, key=lambda epoch: (history[epoch], epoch))
    assert max(history) == overall_best + PATIENCE < 40
    assert history == log.validations("loss")
    uninterrupted_last = torch.load(uninterrupted["dir"] / "checkpoint_last.pt", weights_only=True)["model"]
    resumed_last = torch.load(tmp_path / "checkpoint_last.pt", weights_only=True)["model"]
    assert [name for name, value in resumed_last.items() if not torch.equal(value, uninterrupted_last[name])] == []


def test_average_of_checkpoints_is_the_mean_of_their_weights(uninterrupted, tmp_path):
    sources = last_epoch_checkpoints(uninterrupted["dir"], 3)
    epochs = [int(p.stem.removeprefix("checkpoint")) for p in sources]
    assert epochs == list(range(epochs[-1] - 2, epochs[-1] + 1))  # the last three, in order
    averaged = torch.load(average_checkpoints(sources, tmp_path / "avg.pt"), weights_only=True)
    weights = [torch.load(p, weights_only=True)["model"] for p in sources]
    for name, value in averaged["model"].items():
        expected = sum(w[name].double() for w in weights) / 3
        assert value.dtype == weights[0][name].dtype
        torch.testing.assert_close(value.double(), expected, rtol=0, atol=1e-6)
    assert averaged["last_optimizer_state"] is None
    # the shared embeddings (--share-all-embeddings) stay one tensor: the file holds them once
    tied = ["encoder.embed_tokens.weight", "decoder.embed_tokens.weight", "decoder.output_projection.weight"]
    assert len({same_tensor(weights[-1][name]) for name in tied}) == 1
    assert len({same_tensor(averaged["model"][name]) for name in tied}) == 1
    with pytest.raises(AveragingError, match="holds 3 .*--keep-last-epochs 4"):
        last_epoch_checkpoints(uninterrupted["dir"], 4)


def test_phm_run_trains_to_convergence_and_scores_the_best_and_the_averaged_checkpoints(data, tmp_path):
    configs = tmp_path / "configs" / "converged"
    configs.mkdir(parents=True)
    config = tiny_config(data["bin"], train=TRAINING, evaluate={"average_last": 3})
    path = configs / "phm.yaml"
    path.write_text(yaml.safe_dump(config))
    runs = tmp_path / "runs"
    run_main(phm_run.main, path, "--runs-dir", runs)
    run = runs / "converged" / "phm" / "seed1"
    result = Result.read(run / "result.json")
    training = result.training
    assert training.stopped_early and training.last_epoch == training.best_epoch + PATIENCE < 40
    assert training.valid_metric == "loss" and training.best_valid is not None
    assert training.total_wall_seconds > 0
    averaged = result.averaged_evaluation
    assert [p.rsplit("/", 1)[1] for p in averaged.averaged] == [
        f"checkpoint{e}.pt" for e in range(training.last_epoch - 2, training.last_epoch + 1)
    ]
    assert averaged.checkpoint.endswith("checkpoint_avg_last3.pt") and averaged.metric == "bleu"
    # both checkpoints translated the whole test set, scored with sacrebleu's BLEU and chrF
    references = (data["raw"] / "test.tgt").read_text().splitlines()
    for evaluation, name in ((result.evaluation, "hypotheses.txt"), (averaged, "hypotheses.avg_last3.txt")):
        hypotheses = (run / name).read_text().splitlines()
        assert len(hypotheses) == 30 and evaluation.examples == 30
        assert evaluation.score == round(sacrebleu.corpus_bleu(hypotheses, [references]).score, 2)
        assert evaluation.chrf == round(sacrebleu.corpus_chrf(hypotheses, [references]).score, 2)

    # phm-collect: the averaged checkpoint's row beside the run's, and where the training stopped
    run_main(phm_collect.main, runs / "converged", "--out", tmp_path / "report")
    report = (tmp_path / "report.md").read_text()
    lines = report.splitlines()

    def first_line(start):
        return next(line for line in lines if line.startswith(start))

    # the score table comes first
    assert first_line("| phm |") == f"| phm | {result.evaluation.score} |"
    assert first_line("| phm@avg3 |") == f"| phm@avg3 | {averaged.score} |"
    stopped = first_line("| phm | converged | ")
    assert f"| {training.best_epoch} | {training.last_epoch} | yes |" in stopped

    # result.json lost: evaluated again, not trained again (early stopping had ended the training)
    (run / "result.json").unlink()
    again = run_main(phm_run.main, path, "--runs-dir", runs)
    assert "early stopping ended it: the training finished already" in again.stdout
    assert Result.read(run / "result.json").training.last_epoch == training.last_epoch


def test_training_arguments_of_either_command_form():
    args = ["DATA", "--arch", "x"]
    assert training_arguments(["fairseq-train", *args]) == args
    assert training_arguments(["python", "-m", "phm_experiments.fairseq_train", *args]) == args
    with pytest.raises(ValueError, match="expected a fairseq-train command"):
        training_arguments(["fairseq-generate", *args])


def test_a_training_validated_by_bleu_resumes(data, tmp_path):
    """fairseq's --eval-bleu keeps its counts as numpy arrays in the checkpoints; torch >= 2.6 refused
    them on resume until the plugin allowed numpy arrays of numbers (the converged runs' first resume)."""
    bleu = ["--eval-bleu", "--best-checkpoint-metric", "bleu", "--maximize-best-checkpoint-metric"]
    options = training_options(data["bin"], tmp_path, 1)
    launch(*options, *bleu)
    options[options.index("--max-epoch") + 1] = "2"
    resumed = TrainingLog.parse("".join(launch(*options, *bleu).stdout))
    assert resumed.resumed_from_updates > 0 and resumed.done and sorted(resumed.validations("bleu")) == [2]
