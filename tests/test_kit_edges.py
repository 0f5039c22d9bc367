"""The reproduction kit's run folder: every file it names is one that --force knows."""

from conftest import REPO

from phm_experiments.run_folder import RunFolder


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
