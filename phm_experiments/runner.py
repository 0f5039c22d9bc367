"""One run: a config and a seed -> prepare, (teacher, distill, init), train, evaluate -> result.json.

A run lives in RUNS/<config path under configs/, without .yaml>/seed<S>/:

    checkpoints/       fairseq-train's checkpoints, and fingerprint.json (the config that trained them)
    prepare.log, init.log, train.log, evaluate.log    every command with its output
    hypotheses.txt     the evaluated translations (hypotheses.epochN.txt for evaluate.epochs)
    result.json        the record (results.Result), written last
    distill/           distilled training data made from this run as a teacher (distill.py)

A run whose result.json has the config's every value is done. Otherwise it goes on where it
stopped: checkpoints of the same fingerprint are resumed (fairseq-train's own resume), a
finished training is only re-evaluated; checkpoints of another fingerprint are refused.

RunFolder names the paths of that layout. Runner._run takes the steps in order: prepare, train
(Runner._train: distill, init, fairseq-train) or trained_already, evaluate, record -> result.json.
"""

import contextlib
import dataclasses
import fcntl
import os
import re
import shlex
import shutil
import socket
import sys
import time
from pathlib import Path

from . import averaging, commands, evaluation, fairseq_train
from .commands import CommandFailed, options
from .config import Config, fill, load_config
from .distill import distilled_data
from .fingerprint import Fingerprint, differences
from .logs import TrainingLog
from .provenance import environment  # at load, as results: a queue started before an edit of both kept its own pair
from .results import (
    Distillation,
    Environment,
    Evaluation,
    ExitAfterTraining,
    Init,
    Parameters,
    Result,
    ResultError,
    Teacher,
    Training,
    from_json,
)

CHECKPOINTS = "checkpoints"
BEST = "checkpoint_best.pt"
LAST = "checkpoint_last.pt"
LOCK = ".phm-run.lock"
# what --force removes: the files phm-run and the commands it runs write, by their exact names
# (the data, prepare.log and any file of the user's stay)
MADE_BY_PHM_RUN = re.compile(
    r"(result\.json|train\.log|evaluate\.log|init\.log|hypotheses(\.epoch\d+|\.avg_last\d+)?\.txt)"
)
# fairseq-train's checkpoints (epoch, update, best, last, --keep-best-checkpoints) and phm-run's average;
# with the files of them that a stop cut while they were written (fairseq's NAME.tmp, phm-run's .NAME.partial)
CHECKPOINT = r"checkpoint(\d+|_\d+_\d+|_best|_last|\.best_.+|_avg_last\d+)\.pt"
CHECKPOINT_FILES = re.compile(rf"{CHECKPOINT}(\.tmp)?|\.{CHECKPOINT}\.partial|fingerprint\.json")
# what fairseq-train saves whole and can resume from: epoch, mid-epoch and best checkpoints (not an average)
RESUMABLE = re.compile(r"checkpoint(\d+|_\d+_\d+|_best)\.pt")


class RunError(RuntimeError):
    pass


@dataclasses.dataclass(frozen=True)
class RunFolder:
    """A run's folder (run_directory) and the paths of its files in the layout above, by which a phm-run finds
    what an earlier one left there (evaluation.py names the hypotheses files, distill.py the distilled data)."""

    path: Path

    @property
    def checkpoints(self) -> Path:
        return self.path / CHECKPOINTS

    @property
    def best(self) -> Path:
        return self.checkpoints / BEST

    @property
    def last(self) -> Path:
        return self.checkpoints / LAST

    def epoch(self, epoch: int) -> Path:
        return self.checkpoints / f"checkpoint{epoch}.pt"

    def average(self, count: int) -> Path:
        """The average of the last ``count`` epoch checkpoints (evaluate.average_last)."""
        return self.checkpoints / f"checkpoint_avg_last{count}.pt"

    def log(self, step: str) -> Path:
        """prepare.log, init.log, train.log (and evaluate.log, which evaluation.py writes)."""
        return self.path / f"{step}.log"

    @property
    def result(self) -> Path:
        return self.path / "result.json"

    @property
    def distill(self) -> Path:
        return self.path / "distill"


@dataclasses.dataclass
class Trained:
    """The training step's part of result.json: the training, and the init and distilled data it started from."""

    training: Training
    init: Init | None
    distillation: Distillation | None


@dataclasses.dataclass
class Evaluated:
    """The evaluation step's part of result.json: the best checkpoint's score, each of evaluate.epochs', and
    that of the average of the last evaluate.average_last epochs."""

    best: Evaluation
    epochs: list[Evaluation]
    averaged: Evaluation | None

    def summary(self) -> str:
        """The scores, as the run's last line says them."""
        scores = [f"after epoch {e.epoch}: {e.score}" for e in self.epochs]
        if self.averaged:
            scores.append(f"the last {len(self.averaged.averaged)} epochs averaged: {self.averaged.score}")
        return f"{self.best.metric} {self.best.score}" + (f" ({', '.join(scores)})" if scores else "")


@contextlib.contextmanager
def exclusive(path: Path, when_held):
    """An exclusive lock on the file ``path``, which names its holder while it is held (the system
    drops the lock when the process ends, however it ends). Where another process holds it,
    ``when_held(holder)`` decides: it raises to refuse, or returns to wait until the lock is free."""
    path.parent.mkdir(parents=True, exist_ok=True)
    file = open(path, "a+", encoding="utf-8")
    try:
        try:
            fcntl.flock(file, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            file.seek(0)
            when_held(file.read().strip() or "a process that has not said who it is yet")
            fcntl.flock(file, fcntl.LOCK_EX)
    except BaseException:
        file.close()
        raise
    try:
        file.seek(0)
        file.truncate()
        started = time.strftime("%Y-%m-%d %H:%M:%S")
        file.write(f"pid {os.getpid()} on {socket.gethostname()} since {started}: {shlex.join(sys.argv)}\n")
        file.flush()
        yield
    finally:
        file.truncate(0)
        file.close()  # releases the lock


def run_lock(run_dir: Path):
    """One phm-run at a time in a run folder: an exclusive lock on RUN/.phm-run.lock, held while the
    run is prepared, trained and evaluated; a second phm-run is refused with the holder's name."""

    def refuse(holder):
        raise RunError(
            f"{run_dir} is in use by another phm-run ({holder}): one phm-run at a time in a run folder. "
            "Wait for it to finish, or stop it and run again (an interrupted training resumes)"
        )

    return exclusive(run_dir / LOCK, refuse)


def data_lock(data: Path):
    """One `prepare` at a time for a data folder: an exclusive lock on .<name>.phm-run.lock beside it.
    Runs of several configs share their data, and two phm-runs side by side (two queues, two
    terminals) would otherwise prepare it at once into the same staging folder, and both fail; the second waits."""

    def wait(holder):
        print(f"== waiting for another phm-run to prepare {data} ({holder})", flush=True)

    return exclusive(data.parent / f".{data.name}{LOCK}", wait)


def run_directory(config_path: Path, runs_dir: Path, seed) -> Path:
    parts = Path(config_path).resolve().with_suffix("").parts
    relative = parts[len(parts) - parts[::-1].index("configs") :] if "configs" in parts else parts[-1:]
    return Path(runs_dir).joinpath(*relative, f"seed{seed}")


def is_prepared(data: Path) -> bool:
    """data-prep scripts write prep.json last; data binarized by hand has its dictionaries."""
    return (data / "prep.json").exists() or any(data.glob("dict*.txt")) or any(data.glob("*/dict*.txt"))


def saved_updates(checkpoint: Path):
    """The update count stored in a fairseq checkpoint; None where it cannot be read."""
    import torch

    import phm_fairseq.checkpoints  # noqa: F401  (safe loading of the plugin's checkpoints)

    try:
        state = torch.load(checkpoint, map_location="cpu", weights_only=True, mmap=True)
        return int(state["optimizer_history"][-1]["num_updates"])
    except Exception:  # missing, truncated, or not a fairseq checkpoint: nothing to vouch for
        return None


def count_parameters_of(checkpoint: Path, module=None) -> Parameters:
    """Counts of the trained model (see phm_fairseq.modules.count_parameters), and of one of its
    submodules when ``module`` names one (Table 1 counts the LSTM encoder, Table 5 the layers)."""
    from fairseq import checkpoint_utils

    import phm_fairseq  # noqa: F401  (registers the models the checkpoint names)
    from phm_fairseq.modules import count_parameters

    models, _cfg, _task = checkpoint_utils.load_model_ensemble_and_task([str(checkpoint)])
    counts = count_parameters(models[0]).as_dict()
    if module:
        counts["module"] = {"name": module, **count_parameters(models[0].get_submodule(module)).as_dict()}
    return from_json(Parameters, counts)


class Runner:
    """Runs configs into RUNS; a config's teacher is run first (same seed) when it is not done."""

    def __init__(self, runs_dir: Path, force: bool = False):
        self.runs_dir = Path(runs_dir)
        self.force = force
        self.done = {}  # (config path, seed) -> Result, in this process

    def fingerprint(self, config: Config) -> Fingerprint:
        teacher = self.fingerprint(load_config(config.teacher).with_seed(config.seed)) if config.teacher else None
        return Fingerprint.of(config, teacher)

    def run(self, config: Config, seed=None, force=None) -> Result:
        config = config.with_seed(seed)
        force = self.force if force is None else force
        if (config.path, config.seed) in self.done:
            return self.done[config.path, config.seed]
        name = config.path.name
        run_dir = run_directory(config.path, self.runs_dir, config.seed)
        teacher_config = None
        if config.teacher:
            teacher_config = load_config(config.teacher).with_seed(config.seed)
            print(f"== {name}: its teacher {teacher_config.path.name} (seed {config.seed}) first", flush=True)
            self.run(teacher_config, force=False)
        with run_lock(run_dir):
            result = self._run(config, RunFolder(run_dir), teacher_config, force)
        self.done[config.path, config.seed] = result
        return result

    def _run(self, config: Config, folder: RunFolder, teacher_config, force: bool) -> Result:
        """One run, step by step; what its folder shows done already is not done again (see above)."""
        fields = self._fields(config, folder, teacher_config)
        fingerprint = self.fingerprint(config)
        if force:
            clean(folder, config, fields)
        previous = self._previous(folder.result)
        if previous and previous.config_sha256 == config.sha256:
            print(f"== {config.path.name}: done already ({folder.result})", flush=True)
            return previous
        if previous and previous.fingerprint == fingerprint.sha256 and not folder.best.is_file():
            raise RunError(record_without_checkpoints(config, folder, previous))
        check_checkpoints(folder, fingerprint, config)
        folder.path.mkdir(parents=True, exist_ok=True)
        prepared = prepare(config, fields, folder)
        if previous and previous.fingerprint == fingerprint.sha256:
            trained = trained_already(config, folder, previous)
        else:
            trained = self._train(config, fields, folder, fingerprint, teacher_config)
        evaluated = evaluate(config, fields, folder, trained.init)
        teacher = self._teacher(teacher_config, fields)
        result = record(config, folder, fingerprint, prepared, trained, evaluated, teacher)
        result.write(folder.result)
        print(f"== {config.path.name}: {evaluated.summary()} -> {folder.result}", flush=True)
        return result

    def _fields(self, config: Config, folder: RunFolder, teacher_config) -> dict:
        """The values of the config's placeholders: {data}, {run} and, with a teacher, {teacher} (its run folder)."""
        fields = {"data": config.data, "run": str(folder.path)}
        if teacher_config:
            fields["teacher"] = str(run_directory(teacher_config.path, self.runs_dir, config.seed))
        return fields

    @staticmethod
    def _previous(result_path: Path):
        if not result_path.exists():
            return None
        try:
            return Result.read(result_path)
        except ResultError as error:
            raise RunError(
                f"{error}. Delete that file and run phm-run again: the run is evaluated again, and its "
                "training is kept (resumed if unfinished); --force would retrain it from scratch"
            ) from None

    def _train(
        self, config: Config, fields: dict, folder: RunFolder, fingerprint: Fingerprint, teacher_config
    ) -> Trained:
        """The training step: on the teacher's translations (`distill`), from the `init` checkpoint; fairseq-train
        resumes the checkpoints of this fingerprint (check_checkpoints refused any other)."""
        distillation, data = None, config.data
        if config.distill is not None:
            distilled, distillation = distilled_data(
                config, teacher_config, Path(fields["teacher"]), self.fingerprint(teacher_config).sha256
            )
            data = str(distilled)
        fingerprint.write(folder.checkpoints, config.path)
        init = self._init(config, fields, folder)
        print(f"== {config.path.name}: training", flush=True)
        training = train(config, fields, folder, data, init and init.checkpoint)
        return Trained(training=training, init=init, distillation=distillation)

    @staticmethod
    def _init(config: Config, fields: dict, folder: RunFolder):
        if config.init is None:
            return None
        command, checkpoint = fill(config.init.command, fields), Path(fill(config.init.checkpoint, fields))
        if folder.last.exists():  # resuming: the init is in the checkpoints
            return Init(command=command, checkpoint=str(checkpoint))
        print(f"== {config.path.name}: init", flush=True)
        commands.run_shell(command, folder.log("init"))
        if not checkpoint.is_file():
            raise RunError(
                f"{config.path}: the init command wrote no checkpoint at {checkpoint} "
                f"(init.checkpoint; see {folder.log('init')})"
            )
        return Init(command=command, checkpoint=str(checkpoint))

    def _teacher(self, teacher_config, fields: dict) -> Teacher | None:
        """result.json's record of the teacher run, or None."""
        if not teacher_config:
            return None
        return Teacher(
            config=str(teacher_config.path), run=fields["teacher"], fingerprint=self.fingerprint(teacher_config).sha256
        )


def prepare(config: Config, fields: dict, folder: RunFolder):
    """Runs the config's `prepare` command where its data is not there yet: the command run, or None."""
    data = Path(config.data)
    if is_prepared(data):
        return None
    if not config.prepare:
        raise RunError(f"{config.path}: {config.data} holds no fairseq data and the config has no `prepare` command")
    with data_lock(data):
        if is_prepared(data):  # by the phm-run it waited for
            return None
        prepared = fill(config.prepare, fields)
        print(f"== {config.path.name}: preparing {config.data}", flush=True)
        commands.run_shell(prepared, folder.log("prepare"))
    return prepared


def trained_already(config: Config, folder: RunFolder, previous: Result) -> Trained:
    """The training of an earlier result.json of the same fingerprint, kept (the run is only evaluated again), with
    what train.log says of where the training stopped, as this build reads it."""
    print(f"== {config.path.name}: trained already (the same training fingerprint): evaluating again", flush=True)
    training = previous.training
    if folder.log("train").exists():
        training = dataclasses.replace(training, **stopping(config, TrainingLog.parse(read_text(folder.log("train")))))
    return Trained(training=training, init=previous.init, distillation=previous.distillation)


def train_command(config: Config, fields: dict, folder: RunFolder, data: str, init_checkpoint=None) -> list:
    command = commands.fairseq_train_command(
        data,
        "--save-dir",
        str(folder.checkpoints),
        "--seed",
        str(config.seed),
        "--log-format",
        "json",
        *options(config.train, fields),
    )
    return command + (["--finetune-from-model", str(init_checkpoint)] if init_checkpoint else [])


def restore_cut_last_checkpoint(config: Config, folder: RunFolder) -> None:
    """fairseq writes a checkpoint whole (to a temporary file, then renamed) but copies it to
    checkpoint_best.pt and checkpoint_last.pt: a training stopped during that copy leaves a cut
    checkpoint_last.pt, which it cannot resume from. The file it was copied from is whole and the
    newest: it takes checkpoint_last.pt's place."""
    if not folder.last.exists() or saved_updates(folder.last) is not None:
        return
    whole = [(saved_updates(p), p) for p in folder.checkpoints.iterdir() if RESUMABLE.fullmatch(p.name)]
    whole = [(updates, path) for updates, path in whole if updates is not None]
    if not whole:
        raise RunError(
            f"{config.path}: {folder.last} cannot be read (cut off while fairseq copied it?) and no other "
            f"checkpoint in {folder.checkpoints} can be resumed from: phm-run --force trains the run again"
        )
    updates, newest = max(whole, key=lambda pair: pair[0])
    print(
        f"== {config.path.name}: {LAST} cannot be read (cut off while fairseq copied it): resuming from "
        f"{newest.name}, the newest whole checkpoint (update {updates})",
        flush=True,
    )
    copy = folder.last.with_name(f".{LAST}.partial")
    shutil.copyfile(newest, copy)
    copy.replace(folder.last)


def train(config: Config, fields: dict, folder: RunFolder, data: str, init_checkpoint=None) -> Training:
    """fairseq-train on ``data`` into the run's checkpoints (resumed where there are some): its Training record."""
    command = train_command(config, fields, folder, data, init_checkpoint)
    started = time.time()
    crashed = None
    restore_cut_last_checkpoint(config, folder)
    finished_already = finished_training(config, folder.last)
    if finished_already and folder.log("train").exists():
        # resuming a finished training, fairseq-train would train one update (or epoch) more
        print(f"== {config.path.name}: {finished_already}: the training finished already", flush=True)
        finished = None
    else:
        finished = commands.run(command, folder.log("train"), check=False)
    if finished and finished.returncode:
        updates = completed_updates(finished.output, folder.last)
        if updates is None:
            raise CommandFailed(finished.command, finished.returncode, folder.log("train"), finished.stderr_tail)
        crashed = ExitAfterTraining(returncode=finished.returncode, stderr_tail=finished.stderr_tail)
        print(
            f"== {config.path.name}: fairseq-train exited with code {finished.returncode} AFTER it finished "
            f'training ("done training" logged, checkpoint_last.pt at update {updates}): the training is '
            "complete and is kept; result.json records the exit (training.crashed_at_exit)",
            flush=True,
        )
    log = TrainingLog.parse(read_text(folder.log("train")))
    last = log.epochs[-1] if log.epochs else {}
    return Training(
        command=shlex.join(command),
        updates=log.final_updates or 0,
        epochs=log.epochs_trained,
        **log.speed(),
        final_train_loss=last.get("loss"),
        best_valid_loss=min((v["loss"] for v in log.valid if "loss" in v), default=None),
        wall_seconds=round(time.time() - started, 1),
        resumed_from_updates=log.resumed_from_updates,
        curve=log.curve(),
        crashed_at_exit=crashed,
        data=data if data != config.data else None,
        **stopping(config, log),
    )


def stopping(config: Config, log: TrainingLog) -> dict:
    """Training's fields on where it stopped (Training.last_epoch ... total_wall_seconds), from its log."""
    last = log.epochs[-1] if log.epochs else {}
    metric = config.train.get("best-checkpoint-metric", "loss")
    best_epoch = log.best_epoch(metric, maximize=bool(config.train.get("maximize-best-checkpoint-metric")))
    return {
        "last_epoch": int(last["epoch"]) if "epoch" in last else None,
        "best_epoch": best_epoch,
        "valid_metric": metric,
        "best_valid": log.validations(metric)[best_epoch] if best_epoch is not None else None,
        "stopped_early": log.stopped_early,
        "total_wall_seconds": round(log.wall_seconds, 1),
    }


def evaluate(config: Config, fields: dict, folder: RunFolder, init) -> Evaluated:
    """The evaluation step: the best checkpoint scored, each of evaluate.epochs' (epoch 0: the ``init`` checkpoint),
    and the average of the last evaluate.average_last."""
    print(f"== {config.path.name}: evaluating", flush=True)
    best = evaluation.evaluate(config, fields, folder.path, folder.best)
    epochs = []
    for epoch in config.evaluate.epochs:
        # epoch 0: the model training started from (init), e.g. a compressed one before fine-tuning
        checkpoint = Path(init.checkpoint) if epoch == 0 else folder.epoch(epoch)
        if not checkpoint.is_file():
            saved = sorted(p.name for p in folder.checkpoints.glob("checkpoint[0-9]*.pt"))
            raise RunError(
                f"{config.path}: evaluate.epochs asks for epoch {epoch}, but the training saved no "
                f"{checkpoint} (its epoch checkpoints: {', '.join(saved) or 'none'})"
            )
        epochs.append(evaluation.evaluate(config, fields, folder.path, checkpoint, epoch=epoch))
        epochs[-1].updates = saved_updates(checkpoint)

    averaged = None
    if config.evaluate.average_last:
        averaged = evaluate_average(config, fields, folder, config.evaluate.average_last)
    return Evaluated(best=best, epochs=epochs, averaged=averaged)


def evaluate_average(config: Config, fields: dict, folder: RunFolder, count: int):
    """The average of the last ``count`` epoch checkpoints (checkpoint_avg_lastK.pt), scored."""
    try:
        sources = averaging.last_epoch_checkpoints(folder.checkpoints, count)
    except averaging.AveragingError as error:
        raise RunError(f"{config.path}: evaluate.average_last: {error}") from None
    averaged = averaging.average_checkpoints(sources, folder.average(count))
    print(f"== {config.path.name}: averaged {', '.join(p.name for p in sources)} -> {averaged}", flush=True)
    scored = evaluation.evaluate(config, fields, folder.path, averaged, name=f"hypotheses.avg_last{count}.txt")
    scored.averaged = [str(p) for p in sources]
    return scored


def record(
    config: Config,
    folder: RunFolder,
    fingerprint: Fingerprint,
    prepared,
    trained: Trained,
    evaluated: Evaluated,
    teacher: Teacher | None,
) -> Result:
    """The run's result.json: the steps' records, with the trained model's parameter counts and the environment."""
    return Result(
        config=str(config.path),
        config_sha256=config.sha256,
        description=config.description,
        paper=config.paper.model_dump(exclude_none=True),
        seed=config.seed,
        arch=config.arch,
        prepare_command=prepared,
        parameters=count_parameters_of(folder.best, config.count_module),
        training=trained.training,
        evaluation=evaluated.best,
        epoch_evaluations=evaluated.epochs,
        environment=from_json(Environment, environment()),
        fingerprint=fingerprint.sha256,
        config_values=config.values,
        teacher=teacher,
        distillation=trained.distillation,
        init=trained.init,
        averaged_evaluation=evaluated.averaged,
    )


def read_text(path: Path) -> str:
    return path.read_text(encoding="utf-8")


def finished_training(config: Config, checkpoint: Path):
    """Why the training that saved ``checkpoint`` is over (its update count at train.max-update, or
    early stopping's count at train.patience), or None where it goes on or there is no checkpoint."""
    saved = saved_updates(checkpoint)
    if saved is None:
        return None
    max_update, patience = config.train.get("max-update"), config.train.get("patience")
    if isinstance(max_update, int) and saved >= max_update:
        return f"checkpoint_last.pt is at update {saved} (train.max-update {max_update})"
    state = fairseq_train.early_stopping_state(checkpoint)
    if isinstance(patience, int) and patience > 0 and state and state["num_runs"] >= patience:
        return (
            f"checkpoint_last.pt is {state['num_runs']} validations past its best (train.patience {patience}): "
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


def record_without_checkpoints(config: Config, folder: RunFolder, previous: Result) -> str:
    """Why a run of the same training whose evaluation keys changed cannot be evaluated again: its record
    was kept without its checkpoints (results/runs keeps only result.json in git)."""
    changes = "\n".join(f"  {line}" for line in differences(previous.config_values or {}, config.values))
    return (
        f"{folder.result} was made with other evaluation keys than {config.path} has now:\n{changes}\n"
        f"and {folder.best} is not there to evaluate again (the record was kept without its checkpoints). "
        "Put the checkpoints back, restore those keys, or run it again with --force to train it anew"
    )


def check_checkpoints(folder: RunFolder, fingerprint: Fingerprint, config: Config) -> None:
    """Refuses checkpoints that another config trained: phm-run never resumes them nor deletes them."""
    checkpoints = folder.checkpoints
    saved = (
        sorted(p for p in checkpoints.iterdir() if CHECKPOINT_FILES.fullmatch(p.name)) if checkpoints.is_dir() else []
    )
    saved = [p for p in saved if p.suffix == ".pt"]
    if not saved:
        return
    found = Fingerprint.read(checkpoints)
    remedy = (
        f"To train {config.path.name} from scratch, run it again with --force (it removes this run's "
        f"checkpoints and logs), or save the edited config under another name to keep both runs."
    )
    if found is None:
        raise RunError(
            f"{checkpoints} holds checkpoints ({', '.join(p.name for p in saved)}) without a "
            f"fingerprint: phm-run cannot tell which config trained them (an older phm-run, or "
            f"copied by hand). {remedy}"
        )
    if found.sha256 != fingerprint.sha256:
        changes = "\n".join(f"  {line}" for line in found.changes(fingerprint))
        raise RunError(
            f"{checkpoints} were trained with another config than {config.path} has now:\n{changes}\n{remedy}"
        )


def clean(folder: RunFolder, config: Config, fields: dict) -> None:
    """--force: removes what phm-run made for this run (checkpoints, fingerprint, logs, result,
    hypotheses, init checkpoint inside the run's folder, distilled data); nothing else."""
    checkpoints = folder.checkpoints
    removed = []
    if checkpoints.is_dir():
        for path in checkpoints.iterdir():
            if CHECKPOINT_FILES.fullmatch(path.name) and path.is_file():
                path.unlink()
                removed.append(path)
        if not any(checkpoints.iterdir()):
            checkpoints.rmdir()
    made = [path for path in folder.path.iterdir() if MADE_BY_PHM_RUN.fullmatch(path.name) and path.is_file()]
    if folder.distill.is_dir():  # distilled data (distill.py), made whole by phm-run
        made.append(folder.distill)
    if config.init:
        init = Path(fill(config.init.checkpoint, fields))
        if init.exists() and folder.path.resolve() in init.resolve().parents:
            made.append(init)
    for path in made:
        shutil.rmtree(path) if path.is_dir() else path.unlink()
        removed.append(path)
    if removed:
        print(f"== {config.path.name}: --force: removed {len(removed)} files of {folder.path}", flush=True)


def check_all(paths, runs_dir: Path, seeds=None) -> list:
    """Every config of the command line (and every teacher they name) checked completely, fairseq's
    parsers included, before anything runs: the jobs as (config, seed), or a ConfigError that
    lists every problem found."""
    from .commands import check_model, check_with_fairseq
    from .config import ConfigError, expand

    configs, problems, checked = [], [], set()

    def check(path: Path, chain=()):
        path = path.resolve()
        if path in chain:
            raise ConfigError(f"{path}: `teacher` loops back: {' -> '.join(p.name for p in (*chain, path))}")
        config = load_config(path)
        if config.teacher:
            teacher = check(config.teacher, (*chain, path))
            if config.distill is not None and Path(config.data).resolve() != Path(teacher.data).resolve():
                raise ConfigError(
                    f"{path}:\n  distill: the student trains on its teacher's data with its "
                    f"dictionaries: data {config.data} is not the teacher's {teacher.data}"
                )
        if path not in checked:
            checked.add(path)
            fields = {"data": config.data, "run": str(run_directory(path, runs_dir, config.seed)), "teacher": "TEACHER"}
            extra = ["--finetune-from-model", "init.pt"] if config.init else []
            check_with_fairseq(config, fields, extra)
            if is_prepared(Path(config.data)):  # else its dictionaries are not there yet
                check_model(config, fields)
        return config

    for path in expand(paths):
        try:
            configs.append(check(Path(path)))
        except ConfigError as error:
            problems.append(str(error))
    if problems:
        raise ConfigError("\n".join(problems))
    return [(config, seed) for config in configs for seed in (seeds or [None])]
