"""What an earlier phm-run left in a run's folder, read before anything runs: its record, and checkpoints
to resume from, refuse (another config or other code trained them) or repair (a stop cut checkpoint_last.pt).

fairseq writes each checkpoint whole (to a temporary file, then renamed), but copies it to
checkpoint_best.pt and checkpoint_last.pt: a training stopped during that copy leaves a cut
checkpoint_last.pt, which the newest whole checkpoint beside it (the one being copied) replaces.
"""

import json
import shutil
from pathlib import Path

from . import fairseq_train
from .fingerprint import Fingerprint, differences
from .logs import TrainingLog
from .results import Result, ResultError
from .run_folder import LAST, MADE_IN_CHECKPOINTS, RESUMABLE, RunError

REMEDY = (
    "To train {name} from scratch, run it again with --force (it removes this run's checkpoints and logs), "
    "or save the edited config under another name to keep both runs."
)


def saved_updates(checkpoint: Path):
    """The update count stored in a fairseq checkpoint; None where it cannot be read."""
    import torch

    import phm_fairseq.checkpoints  # noqa: F401  (safe loading of the plugin's checkpoints)

    try:
        state = torch.load(checkpoint, map_location="cpu", weights_only=True, mmap=True)
        return int(state["optimizer_history"][-1]["num_updates"])
    except Exception:  # missing, truncated, or not a fairseq checkpoint: nothing to vouch for
        return None


def previous_result(run):
    """The run's result.json, or None; one that cannot be read is refused with the advice that loses nothing."""
    if not run.folder.result.exists():
        return None
    try:
        return Result.read(run.folder.result)
    except ResultError as error:
        raise RunError(
            f"{error}. Delete that file and run phm-run again: the run is evaluated again, and its "
            "training is kept (resumed if unfinished); --force would retrain it from scratch"
        ) from None


def refuse_record_without_checkpoints(run, previous: Result) -> None:
    """A record of this training whose evaluation keys changed, kept without the checkpoints to evaluate
    again (results/runs keeps only result.json in git), is refused with what changed."""
    if run.folder.best.is_file():
        return
    changes = "\n".join(f"  {line}" for line in differences(previous.config_values or {}, run.config.values))
    raise RunError(
        f"{run.folder.result} was made with other evaluation keys than {run.config.path} has now:\n{changes}\n"
        f"and {run.folder.best} is not there to evaluate again (the record was kept without its checkpoints). "
        "Put the checkpoints back, restore those keys, or run it again with --force to train it anew"
    )


def refuse_checkpoints_of_another_config(run) -> None:
    """Checkpoints that another config trained (or that carry no fingerprint) are refused: phm-run never
    resumes them nor deletes them."""
    checkpoints = run.folder.checkpoints
    saved = (
        sorted(p for p in checkpoints.iterdir() if MADE_IN_CHECKPOINTS.fullmatch(p.name))
        if checkpoints.is_dir()
        else []
    )
    saved = [p for p in saved if p.suffix == ".pt"]
    if not saved:
        return
    found = Fingerprint.read(checkpoints)
    remedy = REMEDY.format(name=run.name)
    if found is None:
        raise RunError(
            f"{checkpoints} holds checkpoints ({', '.join(p.name for p in saved)}) without a "
            f"fingerprint: phm-run cannot tell which config trained them (an older phm-run, or "
            f"copied by hand). {remedy}"
        )
    if found.sha256 != run.fingerprint.sha256:
        changes = "\n".join(f"  {line}" for line in found.changes(run.fingerprint))
        raise RunError(
            f"{checkpoints} were trained with another config than {run.config.path} has now:\n{changes}\n{remedy}"
        )


def keep_the_code_of_the_training(run, code: dict) -> None:
    """A record names the one code state its training ran (provenance.code_state()): the first process of a
    training writes it to checkpoints/code.json, and checkpoints that other code trained are refused rather
    than resumed. Checkpoints from before code.json existed resume as they did."""
    path = run.folder.code
    if run.folder.last.exists():
        if not path.exists():
            return
        trained = json.loads(path.read_text(encoding="utf-8"))
        if trained != code:
            raise RunError(
                f"{run.folder.checkpoints} were trained from commit {_described(trained)}, and the checkout is at "
                f"{_described(code)} now: resumed, the record would name code that did not train its first "
                f"updates. Resume from that commit (git checkout {trained['git_commit'].removesuffix('+uncommitted')}"
                f"{', with the diff in ' + str(path) if trained.get('git_diff') else ''}), or run it again with "
                "--force to train it anew from this checkout"
            )
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(code, indent=2) + "\n", encoding="utf-8")


def _described(code: dict) -> str:
    commit = code["git_commit"]
    return f"{commit.removesuffix('+uncommitted')} with uncommitted changes" if code.get("git_diff") else commit


def restore_cut_last_checkpoint(run) -> None:
    """A checkpoint_last.pt that cannot be read is replaced by the newest whole checkpoint beside it."""
    folder = run.folder
    if not folder.last.exists() or saved_updates(folder.last) is not None:
        return
    whole = [(saved_updates(p), p) for p in folder.checkpoints.iterdir() if RESUMABLE.fullmatch(p.name)]
    whole = [(updates, path) for updates, path in whole if updates is not None]
    if not whole:
        raise RunError(
            f"{run.config.path}: {folder.last} cannot be read (cut off while fairseq copied it?) and no other "
            f"checkpoint in {folder.checkpoints} can be resumed from: phm-run --force trains the run again"
        )
    updates, newest = max(whole, key=lambda pair: pair[0])
    run.say(
        f"{LAST} cannot be read (cut off while fairseq copied it): resuming from "
        f"{newest.name}, the newest whole checkpoint (update {updates})"
    )
    copy = folder.last.with_name(f".{LAST}.partial")
    shutil.copyfile(newest, copy)
    copy.replace(folder.last)


def finished_training(config, checkpoint: Path):
    """Why the training that saved ``checkpoint`` is over (its update count at train.max-update, or
    early stopping's count at train.patience), or None where it goes on or there is no checkpoint:
    resumed, fairseq-train would train one update, or one epoch, more."""
    saved = saved_updates(checkpoint)
    if saved is None:
        return None
    max_update, patience = config.train.get("max-update"), config.train.get("patience")
    if isinstance(max_update, int) and saved >= max_update:
        return f"{LAST} is at update {saved} (train.max-update {max_update})"
    state = fairseq_train.early_stopping_state(checkpoint)
    if isinstance(patience, int) and patience > 0 and state and state["num_runs"] >= patience:
        return (
            f"{LAST} is {state['num_runs']} validations past its best (train.patience {patience}): "
            "early stopping ended it"
        )
    return None


def completed_updates(output: str, checkpoint: Path):
    """The final update count, where fairseq-train's output and its last checkpoint show that the
    training finished; else None.

    fairseq-train sometimes aborts at interpreter exit ("terminate called without an active
    exception", code -6) after it logged "done training" and saved its final checkpoint: such a
    training is complete. It is told from a failed one by both signs: the "done training" record,
    and checkpoint_last.pt holding the update count that the log reports last."""
    log = TrainingLog.parse(output)
    if not log.done or log.final_updates is None:
        return None
    return log.final_updates if saved_updates(checkpoint) == log.final_updates else None
