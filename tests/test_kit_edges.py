"""The reproduction kit's edges, in-process: values no training can use, early stopping that cannot
work and a metric the validation never reports are refused before anything runs; phm-collect refuses
a folder that mixes metrics or tasks, naming the runs; records hold no machine's paths; every file a
run folder names is one that --force knows; a short run logs its progress."""

import os
import shlex
import shutil
from pathlib import Path

import pytest
import yaml
from conftest import REPO, TINY

from phm_experiments.checks import check_all
from phm_experiments.config import ConfigError, load_config
from phm_experiments.report import ReportError, load_results
from phm_experiments.results import Result, portable_command
from phm_experiments.run import Run
from phm_experiments.run_folder import RunFolder
from phm_experiments.runner import Runner, measure_eval_losses
from phm_experiments.training import train_command

RECORDS = REPO / "results" / "runs" / "converged"
TRAIN = {"task": "translation", "arch": "transformer_twin_demo", "optimizer": "adam", "lr": 0.001, **TINY}


def config(tmp_path: Path, train: dict, data="data-bin/not-prepared-yet") -> Path:
    """configs/edges/run.yaml: a tiny translation model with ``train`` on top of TRAIN."""
    path = tmp_path / "configs" / "edges" / "run.yaml"
    path.parent.mkdir(parents=True, exist_ok=True)
    evaluate = {"kind": "bleu", "reference": "{data}/test.tgt"}
    path.write_text(yaml.safe_dump({"data": str(data), "train": {**TRAIN, **train}, "evaluate": evaluate}))
    return path


def problems(tmp_path: Path, train: dict, **data) -> list:
    with pytest.raises(ConfigError) as refused:
        check_all([config(tmp_path, train, **data)], tmp_path / "runs")
    return [line.strip() for line in str(refused.value).splitlines()[1:]]


# --- refused before anything runs ----------------------------------------------------------------


def test_values_no_optimiser_can_use_are_refused_before_anything_runs(tmp_path):
    train = {"lr": -0.001, "weight-decay": -0.1, "adam-betas": "(0.9, 1.2)", "clip-norm": -1}
    assert problems(tmp_path, train) == [
        "train.lr -0.001: a learning rate must be above 0: no optimiser learns at 0 or below",
        "train.weight-decay -0.1: must be 0 or more",
        "train.clip-norm -1.0: must be 0 or more",
        "train.adam-betas (0.9, 1.2): two numbers in [0, 1), e.g. '(0.9, 0.98)'",
    ]
    assert problems(tmp_path, {"lr": 0}) == [
        "train.lr 0.0: a learning rate must be above 0: no optimiser learns at 0 or below"
    ]
    assert check_all([config(tmp_path, {"lr": 0.0005})], tmp_path / "runs")  # the same config, usable


def test_patience_without_the_validations_it_counts_is_refused(tmp_path):
    assert problems(tmp_path, {"patience": 3, "disable-validation": True}) == [
        "train.patience 3: early stopping counts validations without improvement, and "
        "train.disable-validation turns validation off: remove one of the two"
    ]


def prepared_data(folder: Path) -> Path:
    """A fairseq data folder of a copy task's dictionaries and a 3-pair validation split (nothing more is read)."""
    from fairseq.data import Dictionary, indexed_dataset

    dictionary = Dictionary()
    lines = ["a b c", "d e", "f a b d"]
    for line in lines:
        dictionary.encode_line(line, add_if_not_exist=True)
    folder.mkdir(parents=True)
    for side in ("src", "tgt"):
        dictionary.save(str(folder / f"dict.{side}.txt"))
        prefix = str(folder / f"valid.src-tgt.{side}")
        builder = indexed_dataset.make_builder(f"{prefix}.bin", impl="mmap", vocab_size=len(dictionary))
        for line in lines:
            builder.add_item(dictionary.encode_line(line, add_if_not_exist=False))
        builder.finalize(f"{prefix}.idx")
    return folder


def test_a_metric_the_validation_never_reports_is_refused_naming_those_it_reports(tmp_path):
    """fairseq-train reads --best-checkpoint-metric from each validation's figures (train.patience follows it):
    one that the task never reports ended the training at its first validation (KeyError: 'bleu')."""
    data = prepared_data(tmp_path / "data-bin")
    train = {"patience": 2, "best-checkpoint-metric": "bleu", "maximize-best-checkpoint-metric": True}
    [problem] = problems(tmp_path, train, data=data)
    assert problem.startswith(
        "train.best-checkpoint-metric bleu: the validation of task translation with criterion cross_entropy "
        "reports bsz, loss, num_updates, ppl, wpb, wps, not bleu (translation reports bleu with "
        "train.eval-bleu: true). fairseq-train would stop at its first validation (KeyError: 'bleu')"
    )
    # the figures are the validation's own: with --eval-bleu the task reports bleu, and the config passes
    assert check_all([config(tmp_path, {**train, "eval-bleu": True}, data=data)], tmp_path / "runs")


# --- phm-collect: one metric a report, one task a corpus --------------------------------------------


def records(folder: Path, runs: dict) -> Path:
    """Copies of committed records: {place below ``folder``: record below results/runs/converged}."""
    for place, record in runs.items():
        (folder / place).mkdir(parents=True)
        shutil.copy(RECORDS / record / "result.json", folder / place / "result.json")
    return folder


def test_collect_refuses_a_folder_of_runs_scored_by_different_metrics_naming_them(tmp_path, capsys):
    from phm_experiments.cli.collect import main

    mixed = records(
        tmp_path / "mixed",
        {"transformer/seed1": "multi30k/transformer/seed1", "sva_transformer/seed1": "sva/transformer/seed1"},
    )
    with pytest.raises(ReportError) as refused:
        load_results(mixed)
    assert str(refused.value).splitlines()[1:3] == ["  accuracy: sva_transformer/seed1", "  bleu: transformer/seed1"]
    assert f"{mixed} holds runs scored by accuracy and bleu" in str(refused.value)
    with pytest.raises(SystemExit) as exit:
        main([str(mixed), "--out", str(tmp_path / "report")])
    assert exit.value.code == 1 and "phm-collect: error: " in capsys.readouterr().err
    assert not list(tmp_path.glob("report*"))


def test_collect_refuses_a_corpus_of_runs_of_different_tasks_and_takes_them_as_two_corpora(tmp_path):
    sick, sva = "sick/lstm/seed1", "sva/transformer/seed1"  # both scored by accuracy
    one_corpus = records(tmp_path / "one", {"lstm/seed1": sick, "transformer/seed1": sva})
    with pytest.raises(ReportError) as refused:
        load_results(one_corpus)
    assert str(refused.value).splitlines() == [
        "one holds runs of the tasks nli and sentence_classification, whose parameters and speeds cannot be set "
        "against one dense model:",
        "  nli: lstm/seed1",
        "  sentence_classification: transformer/seed1",
        "Put each task's runs in a folder of their own",
    ]
    two_corpora = load_results(records(tmp_path / "two", {sick: sick, sva: sva}))
    assert {entry.column for entry in two_corpora} == {"sick", "sva"}


# --- records hold no machine's paths ----------------------------------------------------------------


def test_committed_records_keep_loading_and_hold_paths_relative_to_the_repository():
    found = sorted(RECORDS.rglob("result.json"))
    assert len(found) >= 60
    for path in found:
        result = Result.read(path)
        assert (REPO / result.config).is_file(), (path, result.config)
        commands = [result.training.command, *(evaluation.command for evaluation in result.evaluations)]
        absolute = [arg for command in commands for arg in shlex.split(command) if os.path.isabs(arg)]
        assert not absolute, f"{path} holds a machine's paths: {absolute}"


def test_records_write_paths_below_the_working_directory_relative_to_it(monkeypatch, tmp_path):
    import phm_fairseq

    monkeypatch.chdir(REPO)
    command = ["fairseq-generate", str(REPO / "data-bin/x"), "--user-dir", phm_fairseq.PLUGIN_DIR, str(tmp_path)]
    assert portable_command(command) == f"fairseq-generate data-bin/x --user-dir phm_fairseq {tmp_path}"
    assert Runner(REPO / "work" / "runs").runs_dir == Path("work/runs")  # the runs' paths below it with it


def test_a_failed_measurement_of_the_losses_with_dropout_off_is_reported_not_raised(tmp_path, capsys):
    """phm-run --eval-losses measures after the record is written: a failure leaves the record and the queue going."""
    run = Run.of(load_config(REPO / "configs/converged/multi30k/transformer.yaml"), tmp_path / "runs")
    measure_eval_losses(run)  # a folder without its checkpoint
    out = capsys.readouterr().out
    assert "losses with dropout off not measured" in out and "no result.json" in out
    assert "python -m phm_experiments.eval_losses measures it" in out and not run.folder.eval_losses.exists()


# --- a run's folder -----------------------------------------------------------------------------------


def test_every_file_a_run_folder_names_is_one_that_force_removes(tmp_path):
    folder = RunFolder.of(REPO / "configs/converged/multi30k/transformer.yaml", tmp_path / "runs", 2)
    assert folder.path == tmp_path / "runs/converged/multi30k/transformer/seed2"
    made = [folder.best, folder.last, folder.epoch(3), folder.average(5), folder.checkpoints / "fingerprint.json"]
    made += [folder.result, folder.log("init"), folder.log("train"), folder.log("evaluate")]
    made += [folder.eval_losses, folder.log("eval_losses")]
    made += [folder.hypotheses(), folder.hypotheses(epoch=0), folder.hypotheses(average=5)]
    made += [folder.distill / "0123456789ab" / "distill.json"]
    users = [folder.log("prepare"), folder.path / "hypotheses.old.txt", folder.checkpoints / "checkpoint_mine.pt"]
    for path in made + users:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("")
    folder.clean()
    assert [path for path in made if path.exists()] == [] and all(path.exists() for path in users)


def test_a_short_run_logs_its_progress_where_its_config_sets_no_interval(tmp_path):
    """fairseq logs every 100 updates by default: a run of fewer would show no progress before its epoch ends."""

    def interval(train: dict) -> list:
        command = train_command(Run.of(load_config(config(tmp_path, train)), tmp_path / "runs"), "data")
        return [command[i + 1] for i, arg in enumerate(command) if arg == "--log-interval"]

    assert interval({"max-update": 40}) == ["4"]
    assert interval({"max-update": 5}) == ["1"]
    # fairseq's own where it logs before the epoch ends (the commands of runs in flight stay as they were)
    assert interval({"max-update": 50_000}) == interval({"max-epoch": 3}) == []
    assert interval({"max-update": 40, "log-interval": 25}) == ["25"]  # the config's own, alone
