"""phm_experiments (phm-run's machinery) on real fairseq runs of a tiny copy task: the json
log reader, result.json's schema, complete config checks, fingerprints and --force, a crash at
exit told from a failed training, and the hooks for teacher runs (distill, init, evaluate.epochs)."""

import csv
import json
import shutil
import statistics
import sys
import time

import pytest
import torch
import yaml
from conftest import TRAIN_COMMAND, copy_task_files, run_main, slow, tiny_config
from pydantic import TypeAdapter, ValidationError

from phm_experiments import commands, provenance, runner, training
from phm_experiments.cli import collect as phm_collect
from phm_experiments.cli import run as phm_run
from phm_experiments.config import load_config
from phm_experiments.logs import TrainingLog, read_records
from phm_experiments.results import SCHEMA_VERSION, ModuleParameters, Parameters, Result, ResultError
from phm_experiments.resume import completed_updates
from phm_experiments.run_folder import run_directory
from phm_experiments.runner import Runner
from phm_fairseq.cli import params as phm_params
from phm_fairseq.modules import ParameterCount


@pytest.fixture(scope="module")
@slow
def kit(tmp_path_factory):
    """A 200-pair copy task, configs/kit/_base.yaml, teacher.yaml (a dense model, 20 updates) and
    student.yaml (fine-tuned from the teacher's last checkpoint), run by phm-run student.yaml: the
    teacher's run is not done, so it runs first."""
    root = tmp_path_factory.mktemp("experiments")
    raw = root / "raw"
    data_bin = copy_task_files(raw, {"train": 200, "valid": 40, "test": 30})
    configs = root / "configs" / "kit"
    configs.mkdir(parents=True)
    base = tiny_config(data_bin, seed=1, train={"max-update": 20, "no-epoch-checkpoints": True, "log-interval": 5})
    (configs / "_base.yaml").write_text(yaml.safe_dump(base, sort_keys=False))
    (configs / "teacher.yaml").write_text("extends: _base.yaml\ntrain: {arch: transformer_twin_demo}\n")
    (configs / "student.yaml").write_text(
        "extends: _base.yaml\nteacher: teacher.yaml\n"
        "init: {command: 'cp {teacher}/checkpoints/checkpoint_last.pt {run}/start.pt', checkpoint: '{run}/start.pt'}\n"
        "train: {arch: transformer_twin_demo, max-update: 25}\n"
    )
    runs = root / "runs"
    out = run_main(phm_run.main, configs / "student.yaml", "--runs-dir", runs)
    return {
        "root": root,
        "configs": configs,
        "runs": runs,
        "raw": raw,
        "data": data_bin,
        "teacher": runs / "kit" / "teacher" / "seed1",
        "stdout": out.stdout,
    }


def write_config(kit, name: str, text: str):
    path = kit["configs"] / name
    path.write_text(text)
    return path


# --- fairseq's json log ------------------------------------------------------------------------


def test_json_log_reader_reads_real_fairseq_train_output(kit):
    text = (kit["teacher"] / "train.log").read_text()
    assert "--log-format json" in text
    log = TrainingLog.parse(text)
    assert log.done and log.final_updates == 20 and log.resumed_from_updates == 0
    assert [int(s["num_updates"]) for s in log.inner] == [5, 10, 15, 20]  # --log-interval 5
    assert len(log.epochs) == text.count(" | INFO | train | {") and log.epochs[-1]["num_updates"] == 20
    assert sum(e["updates_in_epoch"] for e in log.epochs) == 20
    assert len(log.valid) == text.count(" | INFO | valid | {") and {v["subset"] for v in log.valid} == {"valid"}
    assert all(isinstance(v["loss"], float) for v in log.valid)  # fairseq prints "3.846": numbers here
    result = Result.read(kit["teacher"] / "result.json")
    assert result.training.curve == log.curve() and [p[0] for p in result.training.curve["train"]] == [5, 10, 15, 20]
    assert result.training.final_train_loss == log.epochs[-1]["loss"] and result.training.updates == 20


def test_log_records_keep_a_json_record_whole_when_other_lines_follow_it():
    text = (
        '2026-11-21 08:42:54 | INFO | train_inner | {"epoch": 1, "loss": "4.2", "num_updates": "5"}\n'
        "/site-packages/torch/nn/functional.py:6802: UserWarning: a warning on stderr\n"
        "2026-11-21 08:42:55 | INFO | fairseq_cli.train | done training in 1.3 seconds\n"
    )
    records = read_records(text)
    assert [r.name for r in records] == ["train_inner", "fairseq_cli.train"]
    assert records[0].stats() == {"epoch": 1, "loss": 4.2, "num_updates": 5.0}
    assert TrainingLog.parse(text).done


def test_an_epoch_whose_summary_a_stop_cut_off_still_counts_by_its_validation():
    """fairseq validates, saves checkpoint_last.pt, then logs the epoch's summary: stopped in between,
    the next process resumes after that epoch, whose summary never comes (a race the stop test hit)."""

    def record(name, **stats):
        return f"2026-11-21 08:42:54 | INFO | {name} | {json.dumps(stats)}\n"

    first = record("valid", epoch=1, loss="5.1", num_updates="6")  # then the checkpoint: stopped here
    second = (
        "2026-11-21 08:43:10 | INFO | fairseq.trainer | Loaded checkpoint c/checkpoint_last.pt (epoch 2 @ 6 updates)\n"
        + record("valid", epoch=2, loss="4.0", num_updates="12")
        + record("train", epoch=2, train_loss="4.4", train_num_updates="12")
    )
    log = TrainingLog.parse(f"$ fairseq-train\n{first}$ fairseq-train\n{second}")
    assert len(log.epochs) == 1 and log.epochs[0]["updates_in_epoch"] == 6
    assert log.epochs_trained == 2 and log.final_updates == 12
    # an epoch validated twice (stopped before its checkpoint, trained again) counts once
    assert TrainingLog.parse(first + first + second).epochs_trained == 2


# --- result.json ---------------------------------------------------------------------------------


def test_result_schema_round_trip_and_versions(kit, tmp_path):
    path = kit["teacher"] / "result.json"
    stored = json.loads(path.read_text())
    assert stored["schema_version"] == SCHEMA_VERSION
    result = Result.read(path)
    result.write(tmp_path / "again.json")
    assert Result.read(tmp_path / "again.json") == result
    assert json.loads((tmp_path / "again.json").read_text()) == stored  # writer and reader agree on every field
    # a result of this schema written before its latest optional fields (runs in flight when they came) is read
    earlier = {k: v for k, v in stored.items() if k != "averaged_evaluation"}
    stopping = ("last_epoch", "best_epoch", "valid_metric", "best_valid", "stopped_early", "total_wall_seconds")
    earlier["training"] = {k: v for k, v in stored["training"].items() if k not in stopping}
    earlier["evaluation"] = {k: v for k, v in stored["evaluation"].items() if k not in ("chrf", "chrf_signature")}
    old = Result.from_dict(earlier)
    assert old.training.last_epoch is None and old.averaged_evaluation is None and old.evaluation.chrf is None
    assert old.evaluation.score == result.evaluation.score
    (tmp_path / "unversioned.json").write_text(json.dumps({k: v for k, v in stored.items() if k != "schema_version"}))
    with pytest.raises(ResultError, match="no schema_version"):
        Result.read(tmp_path / "unversioned.json")
    (tmp_path / "newer.json").write_text(json.dumps({**stored, "schema_version": SCHEMA_VERSION + 1}))
    with pytest.raises(ResultError, match="newer than this phm-fairseq"):
        Result.read(tmp_path / "newer.json")
    (tmp_path / "typo.json").write_text(json.dumps({**stored, "evaluation": {**stored["evaluation"], "scroe": 1}}))
    with pytest.raises(ResultError, match="unknown field.* scroe"):
        Result.read(tmp_path / "typo.json")


def test_result_parameters_are_the_plugins_count_written_with_the_counts_it_derives():
    count = ParameterCount(total=10, trainable=9, embeddings=3, dense_total=20)
    module = ParameterCount(total=5, trainable=5, embeddings=1, dense_total=8)
    parameters = Parameters.of(count, module=ModuleParameters.of(module, name="encoder.layers"))
    assert (parameters.without_embeddings, parameters.module.dense_without_embeddings) == (7, 7)
    # result.json's "parameters" as before: the counts, the two derived from them, the module
    written = parameters.model_dump()
    assert written == {**count.as_dict(), "module": {**module.as_dict(), "name": "encoder.layers"}}
    assert Parameters.model_validate(written) == parameters
    # the derived counts are read, and must agree with the counts they derive from
    with pytest.raises(ValidationError, match="without_embeddings is 8, but its counts make 7"):
        Parameters.model_validate({**written, "without_embeddings": 8})
    with pytest.raises(ValidationError, match="dense_without_embeddings\n  Field required"):
        Parameters.model_validate({k: v for k, v in written.items() if k != "dense_without_embeddings"})
    with pytest.raises(ValidationError, match="totl\n  Extra inputs are not permitted"):
        Parameters.model_validate({**written, "totl": 10})


# --- complete checks before the first run ------------------------------------------------------


def phm_run_fails(capsys, *args) -> str:
    with pytest.raises(SystemExit) as exit:
        phm_run.main([str(a) for a in args])
    assert exit.value.code != 0
    return capsys.readouterr().err


def test_every_config_is_checked_completely_before_the_first_run(kit, tmp_path, capsys):
    folder = tmp_path / "configs" / "checks"
    folder.mkdir(parents=True)
    base = kit["configs"] / "_base.yaml"
    (folder / "a_good.yaml").write_text(f"extends: {base}\ntrain: {{arch: transformer_twin_demo}}\n")
    (folder / "b_seed.yaml").write_text(f"extends: {base}\nsed: 7\ntrain: {{arch: transformer_twin_demo}}\n")
    (folder / "c_train.yaml").write_text(f"extends: {base}\ntrain: {{arch: phm_transformer_demo, phm_n: 4}}\n")
    (folder / "d_eval.yaml").write_text(
        f"extends: {base}\ntrain: {{arch: transformer_twin_demo}}\n"
        "evaluate: {refrence: x.txt, generate: {beam: '{dta}'}}\n"
    )
    (folder / "e_arch.yaml").write_text(f"extends: {base}\ntrain: {{lr: 0.1, seed: 3}}\ndistill: true\n")
    (folder / "f_epoch0.yaml").write_text(
        f"extends: {base}\ntrain: {{arch: transformer_twin_demo, "
        "no-epoch-checkpoints: false}\nevaluate: {epochs: [0, 1]}\n"
    )
    runs = tmp_path / "runs"
    err = phm_run_fails(capsys, folder, "--runs-dir", runs)
    assert not runs.exists()  # a_good.yaml did not start: every problem is found first
    assert "b_seed.yaml:\n  sed: unknown key (did you mean 'seed'?)" in err
    assert "c_train.yaml:\n  train: fairseq rejects the options: unrecognized arguments: --phm_n 4" in err
    assert "train.phm_n is not a fairseq option (did you mean 'phm-n'?)" in err
    assert "evaluate.refrence: unknown key (did you mean 'reference'?)" in err
    assert "evaluate.generate.beam: unknown placeholder {dta} (did you mean 'data'?)" in err
    assert "train.arch: missing" in err and "train.seed: set the top-level `seed`" in err
    assert "distill: needs a `teacher` config" in err
    assert "f_epoch0.yaml:\n  evaluate.epochs: epoch 0 is the init checkpoint" in err
    assert "a_good.yaml" not in err


def test_fairseq_rejects_bad_values_and_architectures_before_anything_runs(kit, tmp_path, capsys):
    base = kit["configs"] / "_base.yaml"
    (tmp_path / "x.yaml").write_text(f"extends: {base}\ntrain: {{arch: phm_transformer_dmeo, lr: abc}}\n")
    err = phm_run_fails(capsys, tmp_path / "x.yaml", "--runs-dir", tmp_path / "runs")
    assert "x.yaml:\n  train: fairseq rejects the options: argument --lr: invalid" in err
    (tmp_path / "x.yaml").write_text(f"extends: {base}\ntrain: {{arch: phm_transformer_dmeo}}\n")
    err = phm_run_fails(capsys, tmp_path / "x.yaml", "--runs-dir", tmp_path / "runs")
    assert "argument --arch/-a: invalid choice: 'phm_transformer_dmeo'" in err


def test_a_folder_without_configs_is_an_error(tmp_path, capsys):
    (tmp_path / "_base.yaml").write_text("data: x\n")
    assert "no configs in this folder" in phm_run_fails(capsys, tmp_path)


# --- fingerprints and --force --------------------------------------------------------------------


def test_checkpoints_of_another_config_are_refused_and_force_starts_clean(kit, tmp_path, monkeypatch, capsys):
    # a copy of the finished teacher run and its configs, so that the other tests keep theirs
    shutil.copytree(kit["root"] / "configs", tmp_path / "configs")
    shutil.copytree(kit["teacher"], tmp_path / "runs" / "kit" / "teacher" / "seed1")
    config, runs = tmp_path / "configs" / "kit" / "teacher.yaml", tmp_path / "runs"
    run_dir = runs / "kit" / "teacher" / "seed1"
    train_log = (run_dir / "train.log").read_text()

    config.write_text("extends: _base.yaml\ntrain: {arch: transformer_twin_demo, lr: 0.01}\n")
    err = phm_run_fails(capsys, config, "--runs-dir", runs)
    assert "were trained with another config" in err and "  train.lr: 0.005 -> 0.01\n" in err and "--force" in err
    config.write_text("extends: _base.yaml\ntrain: {arch: phm_transformer_demo, phm-n: 2}\n")
    err = phm_run_fails(capsys, config, "--runs-dir", runs)
    assert "train.arch: transformer_twin_demo -> phm_transformer_demo" in err and "train.phm-n: (not set) -> 2" in err
    assert (run_dir / "train.log").read_text() == train_log  # nothing trained, nothing removed

    # an evaluation-only change re-evaluates the trained model, from other code here: the record keeps the
    # environment that trained it and adds the one that evaluated it
    trained_in = Result.read(run_dir / "result.json").environment
    monkeypatch.setattr(runner, "code_state", lambda: {"git_commit": "2222222", "git_diff": None})
    config.write_text("extends: _base.yaml\ntrain: {arch: transformer_twin_demo}\nevaluate: {generate: {beam: 3}}\n")
    phm_run.main([str(config), "--runs-dir", str(runs)])
    out = capsys.readouterr().out
    assert "trained already" in out and f"$ {TRAIN_COMMAND}" not in out
    result = Result.read(run_dir / "result.json")
    assert "--beam 3" in result.evaluation.command and (run_dir / "train.log").read_text() == train_log
    assert result.environment == trained_in and result.evaluated_in.git_commit == "2222222"
    monkeypatch.undo()

    # --force trains the new config from scratch: no resumed checkpoint, no update past max-update
    config.write_text("extends: _base.yaml\ntrain: {arch: transformer_twin_demo, lr: 0.01}\n")
    phm_run.main([str(config), "--runs-dir", str(runs), "--force"])
    log = (run_dir / "train.log").read_text()
    assert log.count(f"$ {TRAIN_COMMAND}") == 1 and "Loaded checkpoint" not in log and "--lr 0.01" in log
    result = Result.read(run_dir / "result.json")
    assert result.config_values["train"]["lr"] == 0.01 and result.training.updates == 20
    assert json.loads((run_dir / "checkpoints" / "fingerprint.json").read_text())["values"]["train"]["lr"] == 0.01


# --- a crash at exit after the final checkpoint --------------------------------------------------

WRAPPER = """\
import os, resource, subprocess, sys
mode, command = sys.argv[1], sys.argv[2:]
if mode == "abort":  # what fairseq-train sometimes does at interpreter exit, after finishing
    subprocess.call(command)
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))  # no core file
    sys.stderr.write("terminate called without an active exception\\n")
    sys.stderr.flush()
    os.abort()
# "die": dies before it logs "done training" (the final checkpoint is there all the same)
process = subprocess.Popen(command, stdout=subprocess.PIPE, text=True)
for line in process.stdout:
    if "done training" in line:
        break
    sys.stdout.write(line)
process.wait()
sys.exit(1)
"""


def test_the_machines_load_is_sampled_while_a_command_runs(tmp_path):
    with commands.LoadAverage(interval=0.01) as load:
        deadline = time.monotonic() + 60
        while len(load.samples) < 2 and time.monotonic() < deadline:
            time.sleep(0.01)
    assert len(load.samples) >= 3  # every interval while it ran, and once at its end
    assert load.mean == round(statistics.fmean(load.samples), 2) >= 0
    assert commands.run([sys.executable, "-c", "pass"], tmp_path / "log").load_average >= 0


def wrap_fairseq_train(monkeypatch, tmp_path, mode):
    wrapper = tmp_path / "wrapper.py"
    wrapper.write_text(WRAPPER)
    real = commands.run

    def run(command, log, **kwargs):
        if " ".join(command).startswith(TRAIN_COMMAND):
            command = [sys.executable, str(wrapper), mode, *command]
        return real(command, log, **kwargs)

    monkeypatch.setattr(commands, "run", run)


def test_a_crash_at_exit_after_the_final_checkpoint_keeps_the_training(kit, tmp_path, monkeypatch, capsys):
    wrap_fairseq_train(monkeypatch, tmp_path, "abort")
    config = write_config(kit, "abort_at_exit.yaml", "extends: _base.yaml\ntrain: {arch: transformer_twin_demo}\n")
    result = Runner(tmp_path / "runs").run(load_config(config))
    out = capsys.readouterr().out
    assert "fairseq-train exited with code -6 AFTER it finished training" in out
    crash = result.training.crashed_at_exit
    assert crash.returncode == -6 and "terminate called without an active exception" in crash.stderr_tail
    assert result.training.updates == 20 and result.evaluation.examples == 30
    assert Result.read(run_directory(config, tmp_path / "runs", 1) / "result.json") == result


def test_a_record_names_the_code_its_run_started_from_not_a_commit_pulled_while_it_trained(kit, tmp_path, monkeypatch):
    checkout = {"commit": "1111111"}
    monkeypatch.setattr(provenance, "git_commit", lambda ignore=(): checkout["commit"])
    train = training.train

    def train_then_pull(run):
        trained = train(run)
        checkout["commit"] = "2222222"  # the run's clone pulled while it trained
        return trained

    monkeypatch.setattr(training, "train", train_then_pull)
    config = write_config(kit, "pulled.yaml", "extends: _base.yaml\ntrain: {arch: transformer_twin_demo}\n")
    result = Runner(tmp_path / "runs").run(load_config(config))
    assert checkout["commit"] == "2222222" and result.environment.git_commit == "1111111"
    run_dir = run_directory(config, tmp_path / "runs", 1)
    assert json.loads((run_dir / "checkpoints" / "code.json").read_text())["git_commit"] == "1111111"


def test_checkpoints_that_other_code_trained_are_not_resumed(kit, tmp_path, monkeypatch, capsys):
    """A resume after a pull would name the new commit for updates the old one trained: refused, with the commit
    to check out, before anything runs."""
    shutil.copytree(kit["root"] / "configs", tmp_path / "configs")
    run_dir = tmp_path / "runs" / "kit" / "teacher" / "seed1"
    shutil.copytree(kit["teacher"], run_dir)
    (run_dir / "result.json").unlink()  # the training to go on, from its checkpoint_last.pt
    code = {"git_commit": "1111111+uncommitted", "git_diff": "diff --git a/x b/x"}
    (run_dir / "checkpoints" / "code.json").write_text(json.dumps(code))
    monkeypatch.setattr(runner, "code_state", lambda: {"git_commit": "2222222", "git_diff": None})
    config = tmp_path / "configs" / "kit" / "teacher.yaml"
    err = phm_run_fails(capsys, config, "--runs-dir", tmp_path / "runs")
    assert "trained from commit 1111111 with uncommitted changes, and the checkout is at 2222222 now" in err
    assert "git checkout 1111111, with the diff in" in err and "--force" in err
    assert json.loads((run_dir / "checkpoints" / "code.json").read_text()) == code  # nothing trained or written


def test_a_training_that_dies_before_done_training_is_a_failure(kit, tmp_path, monkeypatch, capsys):
    wrap_fairseq_train(monkeypatch, tmp_path, "die")
    config = write_config(kit, "dies.yaml", "extends: _base.yaml\ntrain: {arch: transformer_twin_demo}\n")
    with pytest.raises(commands.CommandFailed, match="failed with exit code 1"):
        Runner(tmp_path / "runs").run(load_config(config))
    assert not (run_directory(config, tmp_path / "runs", 1) / "result.json").exists()


def test_completed_updates_needs_done_training_and_the_final_checkpoint(kit, tmp_path):
    log = (kit["teacher"] / "train.log").read_text()
    last = kit["teacher"] / "checkpoints" / "checkpoint_last.pt"
    assert completed_updates(log, last) == 20
    assert completed_updates(log.replace("done training", "(cut)"), last) is None
    assert completed_updates(log, tmp_path / "missing.pt") is None
    state = torch.load(last, weights_only=False)
    state["optimizer_history"][-1]["num_updates"] = 15  # a checkpoint of an earlier update
    torch.save(state, tmp_path / "earlier.pt")
    assert completed_updates(log, tmp_path / "earlier.pt") is None


# --- hooks: teacher runs, distillation, init, evaluate.epochs ------------------------------------


def test_distill_trains_on_the_teachers_translations(kit, tmp_path, monkeypatch):
    from fairseq.data import Dictionary, data_utils

    config = write_config(
        kit,
        "distilled.yaml",
        "extends: _base.yaml\nteacher: teacher.yaml\ndistill: true\ntrain: {arch: phm_transformer_demo, phm-n: 2}\n",
    )
    result = Runner(kit["runs"]).run(load_config(config))
    distillation = result.distillation
    folder = kit["teacher"] / "distill" / distillation.data.rsplit("/", 1)[-1]
    assert folder.parent.parent == kit["teacher"] and folder.is_dir() and distillation.examples == 200
    assert result.teacher.run == str(kit["teacher"]) and result.training.data == distillation.data
    assert "--gen-subset train" in distillation.generate_command and "--beam 2" in distillation.generate_command
    assert result.training.command.startswith(f"{TRAIN_COMMAND} {distillation.data} ")
    # the training targets are the teacher's hypotheses, in the order of the training source
    hypotheses = {}
    for line in (folder / "generate.log").read_text().split("\n"):
        if line.startswith("H-"):
            index, _score, text = line.split("\t")
            hypotheses[int(index[2:])] = text
    dictionary = Dictionary.load(str(kit["data"] / "dict.tgt.txt"))
    targets = data_utils.load_indexed_dataset(str(folder / "train.src-tgt.tgt"), dictionary)
    assert [dictionary.string(targets[i]) for i in range(200)] == [hypotheses[i] for i in range(200)]
    sources = data_utils.load_indexed_dataset(str(folder / "train.src-tgt.src"), dictionary)
    original = data_utils.load_indexed_dataset(str(kit["data"] / "train.src-tgt.src"), dictionary)
    assert all(torch.equal(sources[i], original[i]) for i in range(200))
    assert (folder / "valid.src-tgt.tgt.bin").read_bytes() == (kit["data"] / "valid.src-tgt.tgt.bin").read_bytes()
    # made once per teacher run: a second student finds it
    from phm_experiments.distill import distilled_data

    monkeypatch.setattr(commands, "run", lambda *a, **k: pytest.fail(f"ran {a[0]}"))
    teacher = load_config(kit["configs"] / "teacher.yaml")
    assert distilled_data(load_config(config), teacher, kit["teacher"], result.teacher.fingerprint)[0] == folder


def test_init_and_evaluation_after_each_epoch(kit, tmp_path):
    config = write_config(
        kit,
        "finetuned.yaml",
        (
            "extends: _base.yaml\nteacher: teacher.yaml\n"
            "init: {command: 'cp {teacher}/checkpoints/checkpoint_best.pt {run}/init.pt'}\n"
            "train: {arch: transformer_twin_demo, no-epoch-checkpoints: false}\nevaluate: {epochs: [0, 1, 2]}\n"
        ),
    )
    result = Runner(kit["runs"]).run(load_config(config))
    run_dir = run_directory(config, kit["runs"], 1)
    assert result.init.command == f"cp {kit['teacher']}/checkpoints/checkpoint_best.pt {run_dir}/init.pt"
    log = (run_dir / "train.log").read_text()
    assert f"--finetune-from-model {run_dir}/init.pt" in log
    assert f"loading pretrained model from {run_dir}/init.pt" in log
    # it starts from the trained teacher: its first logged loss is below the teacher's first one
    teacher_start = Result.read(kit["teacher"] / "result.json").training.curve["train"][0][1]
    assert result.training.curve["train"][0][1] < teacher_start - 0.3
    assert [e.epoch for e in result.epoch_evaluations] == [0, 1, 2]
    # epoch 0 is the model the training started from: here a copy of the teacher's best checkpoint
    start, *after = result.epoch_evaluations
    teacher = Result.read(kit["teacher"] / "result.json")
    assert start.checkpoint == f"{run_dir}/init.pt" and start.score == teacher.evaluation.score
    epochs = TrainingLog.parse(log).epochs
    for evaluation, summary in zip(after, epochs):
        assert evaluation.checkpoint.endswith(f"checkpoint{evaluation.epoch}.pt")
        assert evaluation.updates == summary["num_updates"] and evaluation.examples == 30
    assert result.evaluation.checkpoint.endswith("checkpoint_best.pt") and result.evaluation.epoch is None
    assert (run_dir / "hypotheses.epoch2.txt").exists()

    out = tmp_path / "report"
    run_main(phm_collect.main, kit["runs"] / "kit", "--out", out)
    rows = {row["row"]: row for row in csv.DictReader(open(f"{out}.csv"))}
    assert {"finetuned", "finetuned@0ep", "finetuned@1ep", "finetuned@2ep", "teacher"} <= set(rows)
    assert float(rows["finetuned@2ep"]["score"]) == result.epoch_evaluations[2].score
    assert int(rows["finetuned@1ep"]["updates"]) == result.epoch_evaluations[1].updates
    # OUT.epochs.png: the fine-tuned model's scores against its updates plus the teacher's
    from phm_experiments.report import load_results, scores_against_updates

    assert (tmp_path / "report.epochs.png").stat().st_size > 0
    series = scores_against_updates(load_results(kit["runs"] / "kit"))
    updates = teacher.training.updates
    assert series["kit", "finetuned"] == {e.epoch: [(updates + e.updates, e.score)] for e in result.epoch_evaluations}
    assert series["kit", "teacher"] == {None: [(updates, teacher.evaluation.score)]}


def test_a_teacher_that_is_not_done_runs_first(kit):
    # in order: the teacher's result, the student's init (a copy of the teacher's checkpoint), its training
    student = kit["runs"] / "kit" / "student" / "seed1"
    done, init = (kit["teacher"] / "result.json").stat().st_mtime_ns, (student / "start.pt").stat().st_mtime_ns
    assert done <= init <= (student / "checkpoints" / "checkpoint_last.pt").stat().st_mtime_ns
    result = Result.read(kit["runs"] / "kit" / "student" / "seed1" / "result.json")
    assert result.teacher.run == str(kit["teacher"]) and result.init.checkpoint.endswith("start.pt")
    # the fine-tuning counts its own updates from 0 (fairseq resets them with --finetune-from-model)
    assert result.training.updates == 25 and result.training.curve["train"][0][0] == 5


# --- losses with dropout off (eval_losses) ------------------------------------------------------


def test_eval_losses_measures_the_records_checkpoint_and_refuses_another(kit, tmp_path, capsys):
    from phm_experiments import eval_losses

    runs = tmp_path / "runs"
    teacher = runs / "kit" / "teacher" / "seed1"
    shutil.copytree(kit["teacher"], teacher)
    assert eval_losses.main(["--runs-dir", str(runs), "kit/teacher"]) == 0
    measured = json.loads((teacher / "eval_losses.json").read_text())
    training = Result.read(teacher / "result.json").training
    # fairseq-validate's validation loss of checkpoint_best.pt is the record's at its best epoch, to the digit
    assert measured["losses"]["valid"]["loss"] == training.curve["valid"][training.checkpoint_best_epoch - 1][1]
    assert measured["losses"]["train"]["examples"] == 200 and measured["losses"]["valid"]["examples"] == 40
    assert 0 < measured["losses"]["train"]["nll_loss"] <= measured["losses"]["train"]["loss"]
    assert "--valid-subset train,valid" in measured["environment"]["command"]
    assert eval_losses.main(["--runs-dir", str(runs), "kit/teacher"]) == 0
    assert "measured already" in capsys.readouterr().out

    # another run's checkpoint in its place is not the record's: refused, nothing written
    (teacher / "eval_losses.json").unlink()
    student = kit["runs"] / "kit" / "student" / "seed1" / "checkpoints" / "checkpoint_last.pt"
    shutil.copy(student, teacher / "checkpoints" / "checkpoint_best.pt")
    with pytest.raises(SystemExit):
        eval_losses.main(["--runs-dir", str(runs), "kit/teacher"])
    assert "it is not the checkpoint of" in capsys.readouterr().err and not (teacher / "eval_losses.json").exists()
    with pytest.raises(SystemExit):
        eval_losses.main(["--runs-dir", str(runs), "kit/nothing"])
    assert "kit/nothing: no seed*/result.json" in capsys.readouterr().err


def test_phm_run_eval_losses_measures_each_run_it_carries_out(kit, tmp_path):
    config = write_config(kit, "measured.yaml", "extends: _base.yaml\ntrain: {arch: transformer_twin_demo}\n")
    runs = tmp_path / "runs"
    run_main(phm_run.main, config, "--runs-dir", runs, "--eval-losses")
    seed = runs / "kit" / "measured" / "seed1"
    training = Result.read(seed / "result.json").training
    measured = json.loads((seed / "eval_losses.json").read_text())
    assert measured["losses"]["valid"]["loss"] == training.curve["valid"][training.checkpoint_best_epoch - 1][1]
    assert measured["best_epoch"] == training.checkpoint_best_epoch


# --- phm-params on bad checkpoint paths --------------------------------------------------------


def test_phm_params_names_a_missing_checkpoint_and_refuses_empty_ones(kit, tmp_path, capsys):
    folder = kit["teacher"] / "checkpoints"
    with pytest.raises(SystemExit):
        phm_params.main([str(folder / "checkpoint_bst.pt")])
    err = capsys.readouterr().err
    assert f"{folder}/checkpoint_bst.pt: no such checkpoint file; the .pt files in {folder}: checkpoint_best.pt" in err
    (tmp_path / "empty.pt").write_bytes(b"")
    with pytest.raises(SystemExit):
        phm_params.main([str(tmp_path / "empty.pt")])
    assert "is empty (0 bytes): not a checkpoint" in capsys.readouterr().err
    (tmp_path / "cut.pt").write_bytes((folder / "checkpoint_best.pt").read_bytes()[:4000])
    with pytest.raises(SystemExit):
        phm_params.main([str(tmp_path / "cut.pt")])
    assert "cannot be read as a fairseq checkpoint (truncated, or not a checkpoint)" in capsys.readouterr().err


# --- the report's frontier ----------------------------------------------------------------------


def test_the_frontier_keeps_the_models_no_smaller_one_matches_and_is_drawn(tmp_path):
    from types import SimpleNamespace

    from phm_experiments.report.plots import frontier, plot_scores

    def row(name, params, score, std=None):
        return SimpleNamespace(
            row=name, column="multi30k", metric="bleu", score=score, score_std=std, params_no_emb=params, params=params
        )

    rows = [
        row("transformer", 925_696, 34.0, 0.3),
        row("transformer_equal_params", 239_148, 30.0),
        row("phm_n4", 239_104, 32.0, 0.4),
        row("quaternion", 237_568, 31.5, 0.2),
        row("phm_n8", 135_168, 29.0),
        row("phm_n16", 163_840, 28.0),  # more parameters than n=8 and a lower score: off the frontier
        row("phm_n4_rank8", 91_648, 25.0),
    ]
    assert [r.row for r in frontier(rows, "params_no_emb")] == [
        "phm_n4_rank8",
        "phm_n8",
        "quaternion",
        "phm_n4",
        "transformer",
    ]
    # of equal sizes the better; of equal scores the smaller
    tie = [row("a", 100, 20.0), row("b", 100, 21.0), row("c", 200, 21.0)]
    assert [r.row for r in frontier(tie, "params")] == ["b"]
    plot_scores(rows, tmp_path / "frontier.png")
    assert (tmp_path / "frontier.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_models_of_the_same_size_are_drawn_apart_and_centred_on_their_size():
    from phm_experiments.report.plots import dodge

    # three models near 239 k (within 2 %), one alone at 925 k, two at 91 k apart in the list
    offsets = dodge([239_104, 925_696, 239_148, 91_648, 237_568, 91_648], step=7.0)
    assert offsets[1] == 0.0
    assert sorted([offsets[0], offsets[2], offsets[4]]) == [-7.0, 0.0, 7.0]
    assert sorted([offsets[3], offsets[5]]) == [-3.5, 3.5]
    assert dodge([100.0, 103.0]) == [0.0, 0.0]  # 3 % apart: already apart on the plot


def test_the_frontier_gives_20_models_20_colours_the_first_ten_matplotlibs_own():
    from matplotlib.colors import to_rgba

    from phm_experiments.report.plots import palette

    colours = [palette(i) for i in range(20)]
    assert len(set(colours)) == 20
    assert colours[:10] == [to_rgba(f"C{i}") for i in range(10)]
    assert palette(20) == palette(0)  # from the 21st on, the marker tells them apart


def test_rows_are_set_against_the_dense_twin_of_the_compressed_models_not_a_smaller_dense_model():
    from types import SimpleNamespace

    from phm_experiments.report.aggregate import dense_models

    def runs(column, total, dense_total):
        parameters = SimpleNamespace(total=total, dense_total=dense_total)
        return [SimpleNamespace(column=column, result=SimpleNamespace(parameters=parameters))] * 2  # two seeds

    groups = {
        # the dense model of PHM n=4's size comes first by name, but is not what PHM n=4 compresses
        ("multi30k", "transformer_equal_params_lr008"): runs("multi30k", 866_348, 866_348),
        ("multi30k", "transformer_lr008@avg5"): runs("multi30k", 2_180_096, 2_180_096),  # an average: never
        ("multi30k", "transformer_lr008"): runs("multi30k", 2_180_096, 2_180_096),
        ("multi30k", "phm_n4_lr008"): runs("multi30k", 1_493_504, 2_180_096),
        # no compressed model to tell the twin: the first dense model in the paper's order
        ("sick", "lstm_student"): runs("sick", 1_000, 1_000),
        ("sick", "lstm"): runs("sick", 2_000, 2_000),
        ("sva", "phm_n2"): runs("sva", 600, 1_000),  # no dense model at all: no reference
    }
    assert dense_models(groups) == {"multi30k": "transformer_lr008", "sick": "lstm"}


def test_the_papers_figures_stand_beside_ours_as_the_paper_gives_them():
    from types import SimpleNamespace

    from phm_experiments.report.tables import pivot

    # result.json's paper figures read back: a count stays an int, a score a float
    paper = TypeAdapter(Result.model_fields["paper"].annotation)
    read = paper.validate_python({"parameters": 721000, "accuracy": 84.5}, strict=True)
    assert read == {"parameters": 721000, "accuracy": 84.5} and isinstance(read["parameters"], int)
    with pytest.raises(ValidationError):
        paper.validate_python({"parameters": "721K"}, strict=True)
    rows = [SimpleNamespace(row=name, column="sick", untraced=False) for name in ("lstm", "phm_lstm_n2")]
    paper = {"lstm": read["parameters"], "phm_lstm_n2": read["accuracy"]}
    lines = pivot(rows, lambda r: "x", lambda r: paper[r.row])
    assert lines[2:] == ["| lstm | x (721000) |", "| phm_lstm_n2 | x (84.5) |"]
