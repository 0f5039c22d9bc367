"""phm-run with a --runs-dir it cannot write: a clear error, not a traceback; a finished run is still
reported done, since reporting it writes nothing."""

import shutil

from conftest import REPO, run_main

from phm_experiments import run_folder
from phm_experiments.cli import run as phm_run
from phm_experiments.config import load_config
from phm_experiments.results import Result

CONFIG = REPO / "configs" / "converged" / "sva" / "transformer.yaml"  # its data is not prepared here: nothing is built
RECORD = REPO / "results" / "runs" / "converged" / "sva" / "transformer" / "seed1" / "result.json"


def test_a_runs_dir_that_cannot_be_made_is_a_clear_error(tmp_path):
    (tmp_path / "file").write_text("")
    runs = tmp_path / "file" / "runs"  # below a regular file: no one can make it, root included
    out = run_main(phm_run.main, CONFIG, "--runs-dir", runs, check=False)
    assert out.returncode == 1 and "Traceback" not in out.stderr, out.stderr
    assert f"phm-run: error: cannot write {runs}/converged/sva/transformer/seed1" in out.stderr
    assert "below --runs-dir: give one it can write to" in out.stderr


def test_a_finished_run_in_a_runs_dir_that_cannot_be_written_is_reported_done(tmp_path, monkeypatch):
    runs = tmp_path / "runs"
    folder = run_folder.RunFolder.of(CONFIG, runs, 1).path
    folder.mkdir(parents=True)
    shutil.copy(RECORD, folder / "result.json")
    # the record of the config as it is now: the test does not depend on the committed record being current
    record = Result.read(folder / "result.json").model_copy(update={"config_sha256": load_config(CONFIG).sha256})
    record.write(folder / "result.json")
    before = sorted(runs.rglob("*"))

    # tests run as root, whom file modes do not stop: the run folder's files cannot be opened, as in a
    # folder of another user's
    def unwritable(path, *args, **kwargs):
        raise PermissionError(13, "Permission denied", str(path))

    monkeypatch.setattr(run_folder, "open", unwritable, raising=False)
    out = run_main(phm_run.main, CONFIG, "--runs-dir", runs, check=False)
    assert out.returncode == 0 and "Traceback" not in out.stderr, out.stderr
    assert f"done already ({folder / 'result.json'})" in out.stdout
    assert sorted(runs.rglob("*")) == before  # nothing written, not even the lock file
