"""The training step: fairseq-train into the run's checkpoints (resumed where there are some of its
fingerprint), on the teacher's translations (`distill`) and from the `init` checkpoint where the config
says so; or the training of an earlier record kept, where only the evaluation keys changed."""

import dataclasses
import time
from pathlib import Path
from typing import Optional

from . import commands
from .commands import CommandFailed, options
from .distill import distilled_data
from .logs import TrainingLog
from .results import Distillation, ExitAfterTraining, Init, Result, Training, portable_command, portable_path
from .resume import completed_updates, finished_training, restore_cut_last_checkpoint
from .run_folder import RunError

# fairseq-train's own --log-interval; a run of fewer updates would print no progress before its epoch ends
FAIRSEQ_LOG_INTERVAL = 100


@dataclasses.dataclass
class Trained:
    """The training step's part of result.json (its fields, by their names there)."""

    training: Training
    init: Optional[Init]
    distillation: Optional[Distillation]


def train(run) -> Trained:
    """The training step; fairseq-train resumes the checkpoints of this fingerprint (resume.py refused any other)."""
    distillation, data = None, run.config.data
    if run.config.distill is not None:
        teacher = run.teacher
        distilled, distillation = distilled_data(
            run.config, teacher.config, teacher.folder.path, teacher.fingerprint.sha256
        )
        data = str(distilled)
    run.fingerprint.write(run.folder.checkpoints, portable_path(run.config.path))
    init = initialise(run)
    run.say("training")
    training = run_fairseq_train(run, data, init and init.checkpoint)
    return Trained(training=training, init=init, distillation=distillation)


def trained_already(run, previous: Result) -> Trained:
    """The training of an earlier result.json of the same fingerprint, kept (the run is only evaluated again),
    with what train.log says of where the training stopped, as this build reads it."""
    run.say("trained already (the same training fingerprint): evaluating again")
    training = previous.training
    if run.folder.log("train").exists():
        training = training.model_copy(update=stopping(run.config, TrainingLog.parse(read_log(run, "train"))))
    return Trained(training=training, init=previous.init, distillation=previous.distillation)


def initialise(run) -> Optional[Init]:
    """Runs the config's `init` command before a fresh training: the checkpoint it writes is where training starts."""
    if run.config.init is None:
        return None
    command, checkpoint = run.fill(run.config.init.command), Path(run.fill(run.config.init.checkpoint))
    if not run.folder.last.exists():  # resuming: the init is in the checkpoints
        run.say("init")
        commands.run_shell(command, run.folder.log("init"))
        if not checkpoint.is_file():
            raise RunError(
                f"{run.config.path}: the init command wrote no checkpoint at {checkpoint} "
                f"(init.checkpoint; see {run.folder.log('init')})"
            )
    return Init(command=command, checkpoint=str(checkpoint))


def train_command(run, data: str, init_checkpoint=None) -> list:
    train = run.config.train
    interval = log_interval(train)
    command = commands.fairseq_train_command(
        data,
        "--save-dir",
        str(run.folder.checkpoints),
        "--seed",
        str(run.config.seed),
        "--log-format",
        "json",
        *(["--log-interval", str(interval)] if interval else []),
        *options(train, run.fields),
    )
    return command + (["--finetune-from-model", str(init_checkpoint)] if init_checkpoint else [])


def log_interval(train: dict):
    """The --log-interval that phm-run passes where the config gives none: a tenth of a train.max-update
    under 1,000, so that a short training shows its progress (fairseq's own 100 would show none before
    the epoch ends); None where the config's or fairseq's own serves."""
    max_update = train.get("max-update")
    if "log-interval" in train or not isinstance(max_update, int) or max_update <= 0:
        return None
    interval = max(1, max_update // 10)
    return interval if interval < FAIRSEQ_LOG_INTERVAL else None


def run_fairseq_train(run, data: str, init_checkpoint=None) -> Training:
    """fairseq-train on ``data`` into the run's checkpoints (resumed where there are some): its Training record."""
    folder, log_file = run.folder, run.folder.log("train")
    command = train_command(run, data, init_checkpoint)
    started = time.time()
    crashed = None
    restore_cut_last_checkpoint(run)
    finished_already = finished_training(run.config, folder.last)
    if finished_already and log_file.exists():
        # resuming a finished training, fairseq-train would train one update (or epoch) more
        run.say(f"{finished_already}: the training finished already")
        finished = None
    else:
        finished = commands.run(command, log_file, check=False)
    if finished and finished.returncode:
        updates = completed_updates(finished.output, folder.last)
        if updates is None:
            raise CommandFailed(finished.command, finished.returncode, log_file, finished.stderr_tail)
        crashed = ExitAfterTraining(returncode=finished.returncode, stderr_tail=finished.stderr_tail)
        run.say(
            f"fairseq-train exited with code {finished.returncode} AFTER it finished "
            f'training ("done training" logged, checkpoint_last.pt at update {updates}): the training is '
            "complete and is kept; result.json records the exit (training.crashed_at_exit)"
        )
    log = TrainingLog.parse(read_log(run, "train"))
    last = log.epochs[-1] if log.epochs else {}
    return Training(
        command=portable_command(command),
        updates=log.final_updates or 0,
        epochs=log.epochs_trained,
        **log.speed(),
        final_train_loss=last.get("loss"),
        best_valid_loss=min((v["loss"] for v in log.valid if "loss" in v), default=None),
        wall_seconds=round(time.time() - started, 1),
        resumed_from_updates=log.resumed_from_updates,
        curve=log.curve(),
        crashed_at_exit=crashed,
        data=data if data != run.config.data else None,
        load_average=finished.load_average if finished and not log.resumed_from_updates else None,
        **stopping(run.config, log),
    )


def stopping(config, log: TrainingLog) -> dict:
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


def read_log(run, step: str) -> str:
    return run.folder.log(step).read_text(encoding="utf-8")
