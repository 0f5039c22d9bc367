"""phm-run and phm-collect lose nothing and pool nothing silently: one phm-run per run folder, its
commands end with it, --force removes only what it wrote, a broken result.json is answered with the
advice that keeps the training, configs of different values are never averaged, and configs are
read strictly (duplicate keys, aliases, seeds, a model that cannot be built)."""

import json
import os
import shutil
import signal
import subprocess
import time
from pathlib import Path

import pytest
import yaml
from conftest import TRAIN_COMMAND, console, copy_task_files, run_main, slow, tiny_config, with_default_sigint

from phm_experiments.cli import collect as phm_collect
from phm_experiments.cli import run as phm_run_cli
from phm_experiments.config import ConfigError, load_config
from phm_experiments.data import data_lock
from phm_experiments.run_folder import run_lock


@pytest.fixture(scope="module")
@slow
def setup(tmp_path_factory):
    """A 200-pair copy task and configs/rel/_base.yaml: a tiny PHM Transformer, 10 updates."""
    root = tmp_path_factory.mktemp("reliability")
    raw = root / "raw"
    data_bin = copy_task_files(raw, {"train": 200, "valid": 40, "test": 30})
    configs = root / "configs" / "rel"
    configs.mkdir(parents=True)
    base = tiny_config(
        data_bin,
        train={"arch": "phm_transformer_demo", "phm-n": 2, "max-tokens": 256, "max-update": 10, "log-interval": 5},
    )
    (configs / "_base.yaml").write_text(yaml.safe_dump(base, sort_keys=False))
    return {"root": root, "configs": configs, "runs": root / "runs"}


def config(setup, name: str, text: str = "extends: _base.yaml\n") -> Path:
    path = setup["configs"] / name
    path.write_text(text)
    return path


def phm_run(setup, *args, check=True):
    """phm-run in this process (the tests of signals and of two phm-runs side by side start their own)."""
    return run_main(phm_run_cli.main, *args, "--runs-dir", setup["runs"], check=check)


def run_folder(setup, name: str, seed: int = 1) -> Path:
    return setup["runs"] / "rel" / name / f"seed{seed}"


@pytest.fixture(scope="module")
def finished(setup) -> Path:
    """The run folder of one finished phm-run of _base.yaml, for the tests that begin with a finished run
    (finished_copy): one training for all of them."""
    phm_run(setup, config(setup, "finished.yaml"))
    return run_folder(setup, "finished")


def finished_copy(setup, finished: Path, name: str) -> Path:
    """Config NAME.yaml (_base.yaml as it is) with a finished run: ``finished`` copied to its run folder."""
    shutil.copytree(finished, run_folder(setup, name))
    return config(setup, f"{name}.yaml")


# --- one phm-run per run folder; its commands end with it -----------------------------------------


def test_a_second_phm_run_on_a_run_folder_in_use_is_refused_and_says_who_holds_it(setup):
    path = config(setup, "locked.yaml")
    folder = run_folder(setup, "locked")
    with run_lock(folder):
        out = phm_run(setup, path, check=False)
    assert out.returncode == 1 and f"{folder} is in use by another phm-run (pid {os.getpid()} on " in out.stderr
    assert not (folder / "checkpoints").exists()  # it trained nothing


def test_a_phm_run_waits_for_another_that_prepares_the_same_data_and_prepares_nothing_itself(setup, tmp_path):
    # two phm-runs side by side (scripts/converged.sh once ran two queues) whose first runs share data
    # that is not there yet:
    # both prepared it at once into one staging folder, and both failed
    prepared = Path(yaml.safe_load((setup["configs"] / "_base.yaml").read_text())["data"])
    data = tmp_path / "data-bin" / "copy"
    path = config(setup, "shared_data.yaml", f"extends: _base.yaml\ndata: {data}\nprepare: exit 3\n")
    with data_lock(data):
        process = subprocess.Popen(
            [console("phm-run"), str(path), "--runs-dir", str(setup["runs"])],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        waiting, seen = f"== waiting for another phm-run to prepare {data} (pid {os.getpid()} on ", []
        while not seen or not seen[-1].startswith(waiting):
            line = process.stdout.readline()
            assert line, (seen, process.communicate())
            seen.append(line)
        shutil.copytree(prepared, data)  # what the other phm-run's `prepare` writes
    out, err = process.communicate(timeout=300)
    assert process.returncode == 0, err
    folder = run_folder(setup, "shared_data")
    assert not (folder / "prepare.log").exists()  # its own `prepare` (exit 3) never ran
    assert json.loads((folder / "result.json").read_text())["prepare_command"] is None


def fairseq_train_processes(folder: Path) -> list:
    """The pids of processes whose command line names this run folder's checkpoints."""
    pids = []
    for proc in Path("/proc").iterdir():
        try:
            if proc.name.isdigit() and str(folder / "checkpoints") in (proc / "cmdline").read_text().replace("\0", " "):
                pids.append(int(proc.name))
        except OSError:  # ended meanwhile
            pass
    return pids


LONG = "extends: _base.yaml\ntrain: {max-update: null, max-epoch: 25}\n"  # about 150 updates


def start_and_stop(setup, name: str, how: int):
    """Starts phm-run on a longer training, waits for its first saved epoch, sends it ``how``; returns
    its exit code, stderr and run folder once no process of that training is left (fails after 60 s)."""
    path = config(setup, name, LONG)
    folder = run_folder(setup, name.removesuffix(".yaml"))
    process = subprocess.Popen(
        [console("phm-run"), str(path), "--runs-dir", str(setup["runs"])],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=with_default_sigint,
    )
    deadline = time.monotonic() + 300
    while not (folder / "checkpoints" / "checkpoint_last.pt").exists():
        assert process.poll() is None and time.monotonic() < deadline, process.communicate()
        time.sleep(0.2)
    assert fairseq_train_processes(folder)
    process.send_signal(how)
    _out, err = process.communicate(timeout=60)
    deadline = time.monotonic() + 60
    while fairseq_train_processes(folder):
        assert time.monotonic() < deadline, "fairseq-train outlived phm-run"
        time.sleep(0.2)
    return process.returncode, err, folder


def test_a_stopped_phm_run_stops_its_training_and_the_next_one_resumes_it(setup):
    code, err, folder = start_and_stop(setup, "stopped.yaml", signal.SIGTERM)
    assert code == 128 + signal.SIGTERM and "phm-run: stopped" in err
    assert not (folder / "result.json").exists()
    # what a stop during fairseq's copy of the saved checkpoint to checkpoint_last.pt leaves
    last = folder / "checkpoints" / "checkpoint_last.pt"
    last.write_bytes(last.read_bytes()[:4000])
    out = phm_run(setup, setup["configs"] / "stopped.yaml")
    assert "checkpoint_last.pt cannot be read (cut off while fairseq copied it): resuming from checkpoint" in out.stdout
    log = (folder / "train.log").read_text()
    assert log.count(f"$ {TRAIN_COMMAND}") == 2 and "Loaded checkpoint" in log
    training = json.loads((folder / "result.json").read_text())["training"]
    assert training["resumed_from_updates"] > 0 and training["last_epoch"] == 25
    # phm-run saw the load beside only the second process's updates: no load, no speed set against another's
    assert training["load_average"] is None
    # the record covers both processes: every epoch's updates, as the log says
    assert training["epochs"] >= 25 and training["updates"] == training["curve"]["valid"][-1][0]


def test_a_cut_checkpoint_last_with_no_whole_checkpoint_beside_it_is_a_clear_error(tmp_path):
    from phm_experiments.resume import restore_cut_last_checkpoint
    from phm_experiments.run import Run
    from phm_experiments.run_folder import RunError, RunFolder

    folder = RunFolder(tmp_path)
    folder.checkpoints.mkdir()
    for name in ("checkpoint_last.pt", "checkpoint3.pt", "checkpoint_avg_last5.pt"):
        (folder.checkpoints / name).write_bytes(b"PK\x03\x04 cut")
    config = tmp_path / "c.yaml"
    config.write_text("data: d\ntrain: {arch: a}\nevaluate: {kind: accuracy}\n")
    with pytest.raises(RunError, match="cannot be read .* no other checkpoint in .* --force trains the run again"):
        restore_cut_last_checkpoint(Run(load_config(config), folder))
    assert (folder.checkpoints / "checkpoint_last.pt").read_bytes() == b"PK\x03\x04 cut"  # nothing lost


def test_ctrl_c_stops_phm_run_and_its_training(setup):
    code, err, _folder = start_and_stop(setup, "interrupted.yaml", signal.SIGINT)
    assert code == 130 and "phm-run: stopped" in err


def test_a_killed_phm_run_takes_its_training_with_it(setup):
    """SIGKILL leaves phm-run no say: Linux ends the training (PR_SET_PDEATHSIG)."""
    code, _err, _folder = start_and_stop(setup, "killed.yaml", signal.SIGKILL)
    assert code == -signal.SIGKILL


# --- --force and result.json --------------------------------------------------------------------


def test_force_removes_what_phm_run_wrote_and_nothing_else(setup, finished):
    path = finished_copy(setup, finished, "forced")
    folder = run_folder(setup, "forced")
    mine = [
        folder / "hypotheses.old.txt",
        folder / "hypotheses_backup.txt",
        folder / "notes.md",
        folder / "checkpoints" / "checkpoint_mine_finetuned.pt",
    ]
    for file in mine:
        file.write_text("the user's own")
    # what a stop leaves of a checkpoint cut while fairseq (NAME.tmp) or phm-run (.NAME.partial) wrote it
    cut = [folder / "checkpoints" / name for name in ("checkpoint2.pt.tmp", ".checkpoint_last.pt.partial")]
    for file in cut:
        file.write_bytes(b"PK\x03\x04 cut")
    written = {p.name for p in folder.iterdir()} | {p.name for p in (folder / "checkpoints").iterdir()}
    assert {"result.json", "train.log", "evaluate.log", "hypotheses.txt", "checkpoint_best.pt"} <= written
    out = phm_run(setup, path, "--force")
    assert not any(file.exists() for file in cut)
    assert "--force: removed" in out.stdout and "No existing checkpoint found" in (folder / "train.log").read_text()
    assert all(file.read_text() == "the user's own" for file in mine)


def test_a_broken_result_json_gets_the_advice_that_keeps_the_training(setup, finished):
    path = finished_copy(setup, finished, "broken")
    folder = run_folder(setup, "broken")
    for content, problem in (('{"config": "trunc', "cannot read it as a result"), ("[]", "a result is a JSON object")):
        (folder / "result.json").write_text(content)
        out = phm_run(setup, path, check=False)
        assert out.returncode == 1 and problem in out.stderr and "Delete that file and run phm-run again" in out.stderr
        collected = run_main(phm_collect.main, folder.parent, "--out", setup["root"] / "broken", check=False)
        assert collected.returncode == 1 and problem in collected.stderr
        assert "Traceback" not in out.stderr + collected.stderr
    (folder / "result.json").unlink()
    again = phm_run(setup, path)
    assert "the training finished already" in again.stdout and (folder / "result.json").exists()


def test_a_kept_record_without_checkpoints_is_not_evaluated_again_and_says_what_changed(setup, finished):
    # results/runs keeps only result.json in git: a record of the converged runs whose evaluation keys
    # were edited has no checkpoint to evaluate again
    path = finished_copy(setup, finished, "record_only")
    folder = run_folder(setup, "record_only")
    shutil.rmtree(folder / "checkpoints")
    assert "done already" in phm_run(setup, path).stdout  # the record alone is a finished run
    config(setup, "record_only.yaml", 'extends: _base.yaml\ndescription: "edited"\n')
    out = phm_run(setup, path, check=False)
    assert out.returncode == 1 and "Traceback" not in out.stderr, out.stderr
    assert "was made with other evaluation keys" in out.stderr and "description: (not set) -> edited" in out.stderr
    assert json.loads((folder / "result.json").read_text())["description"] == ""  # the record is kept as it was


# --- phm-collect pools one config only ------------------------------------------------------------


def test_collect_refuses_to_average_seeds_of_different_configs(setup, finished):
    # seed 1 ran, then the config was edited and seed 2 ran
    path = finished_copy(setup, finished, "edited")
    config(setup, "edited.yaml", "extends: _base.yaml\ntrain: {lr: 0.002}\n")
    phm_run(setup, path, "--seeds", "2")
    out = run_main(phm_collect.main, setup["runs"] / "rel" / "edited", "--out", setup["root"] / "edited", check=False)
    assert out.returncode == 1 and "seed 1 and seed 2 ran different configs" in out.stderr
    assert "train.lr: 0.005 -> 0.002" in out.stderr


def test_collect_refuses_an_out_path_it_cannot_write(setup, tmp_path):
    (tmp_path / "file").write_text("")
    for out in ("", "reports/", str(tmp_path / "file" / "report")):
        result = run_main(phm_collect.main, setup["runs"], "--out", out, check=False)
        assert result.returncode == 2 and "--out" in result.stderr and "Traceback" not in result.stderr
    assert not list(Path.cwd().glob(".*.md"))


# --- configs read strictly ----------------------------------------------------------------------


def test_duplicate_keys_are_refused_with_the_file_and_the_lines(setup):
    for text, key, lines in (
        ("extends: _base.yaml\ntrain: {lr: 0.001, lr: 0.5}\n", "lr", "lines 2 and 2"),
        ("extends: _base.yaml\ntrain:\n  arch: transformer_twin_demo\ntrain:\n  lr: 0.5\n", "train", "lines 2 and 4"),
    ):
        path = config(setup, "duplicate.yaml", text)
        with pytest.raises(ConfigError, match=f"key '{key}' given twice \\({lines}\\)") as error:
            load_config(path)
        assert str(path) in str(error.value)


def test_yaml_aliases_are_refused_at_once(setup):
    bomb = "a: &a [1, 1, 1, 1, 1, 1, 1, 1, 1]\n" + "".join(
        f"{chr(98 + i)}: &{chr(98 + i)} [{', '.join([f'*{chr(97 + i)}'] * 9)}]\n" for i in range(8)
    )
    path = config(setup, "bomb.yaml", bomb)
    started = time.monotonic()
    with pytest.raises(ConfigError, match="alias \\*a: configs do not use YAML aliases"):
        load_config(path)
    assert time.monotonic() - started < 5


def test_seeds_outside_fairseqs_range_are_refused_before_anything_runs(setup):
    path = config(setup, "seeds.yaml")
    for seed in ("-3", "4294967296"):
        out = phm_run(setup, path, "--seeds", seed, check=False)
        assert out.returncode == 2 and "a seed is an integer from 0 to 4294967295" in out.stderr
    negative = config(setup, "negative_seed.yaml", "extends: _base.yaml\nseed: -3\n")
    out = phm_run(setup, negative, check=False)
    assert out.returncode == 2 and "seed: expected an integer from 0 to 4294967295" in out.stderr
    assert not (setup["runs"] / "rel" / "seeds").exists() and not (setup["runs"] / "rel" / "negative_seed").exists()


def test_a_model_that_cannot_be_built_is_refused_before_any_config_runs(setup):
    fine = config(setup, "a_fine.yaml")
    wrong = config(setup, "b_phm_n3.yaml", "extends: _base.yaml\ntrain: {phm-n: 3}\n")
    out = phm_run(setup, fine, wrong, check=False)
    assert out.returncode == 2 and "fairseq cannot build the model phm_transformer_demo" in out.stderr
    assert "--phm-n 3 must divide" in out.stderr
    assert not run_folder(setup, "a_fine").exists()  # refused up front: the fine config did not run first


def test_runs_dir_that_is_a_file_is_refused(setup, tmp_path):
    (tmp_path / "runs").write_text("")
    out = run_main(phm_run_cli.main, config(setup, "x.yaml"), "--runs-dir", tmp_path / "runs", check=False)
    assert out.returncode == 2 and "is a file, not a folder of runs" in out.stderr and "Traceback" not in out.stderr


def test_result_json_of_a_list_is_refused_by_the_reader(tmp_path):
    from phm_experiments.results import Result, ResultError

    (tmp_path / "result.json").write_text(json.dumps([]))
    with pytest.raises(ResultError, match="a result is a JSON object, not list"):
        Result.read(tmp_path / "result.json")
