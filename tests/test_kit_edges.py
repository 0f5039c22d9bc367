"""The reproduction kit's edges, in-process: records hold no machine's paths; every file a run folder
names is one that --force knows."""

import os
import shlex
from pathlib import Path

from conftest import REPO

from phm_experiments.commands import portable_command
from phm_experiments.results import Result
from phm_experiments.run_folder import RunFolder
from phm_experiments.runner import Runner

RECORDS = REPO / "results" / "runs" / "converged"


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


# --- a run's folder -----------------------------------------------------------------------------------


def test_every_file_a_run_folder_names_is_one_that_force_removes(tmp_path):
    folder = RunFolder.of(REPO / "configs/converged/multi30k/transformer.yaml", tmp_path / "runs", 2)
    assert folder.path == tmp_path / "runs/converged/multi30k/transformer/seed2"
    made = [folder.best, folder.last, folder.epoch(3), folder.average(5), folder.checkpoints / "fingerprint.json"]
    made += [folder.result, folder.log("init"), folder.log("train"), folder.log("evaluate")]
    made += [folder.hypotheses(), folder.hypotheses(epoch=0), folder.hypotheses(average=5)]
    made += [folder.distill / "0123456789ab" / "distill.json"]
    users = [folder.log("prepare"), folder.path / "hypotheses.old.txt", folder.checkpoints / "checkpoint_mine.pt"]
    for path in made + users:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("")
    folder.clean()
    assert [path for path in made if path.exists()] == [] and all(path.exists() for path in users)
