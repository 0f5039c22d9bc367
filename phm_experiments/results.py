"""result.json: the record of one run, written by phm-run and read by phm-collect.

One schema for writer and reader, in pydantic models as the configs' (config.py): ``Result.write``
stores a Result as JSON with ``schema_version``; ``Result.read`` validates a file back, strictly (no
unknown field, no conversion between types but an integer where a number is due), and refuses one
it cannot read with a message that says why. Fields added to the schema later are optional, so that
results written before them stay readable.

Paths in a record are relative to the working directory phm-run ran in (the repository's root for
the committed records), as the configs' data paths are: no record holds a machine's paths.
"""

import json
import os
import shlex
from pathlib import Path
from typing import Optional

from pydantic import BaseModel, ConfigDict, ValidationError, model_validator

from phm_layers.parameter_count import ParameterCount

from .config import Number

SCHEMA_VERSION = 1


def portable_path(path) -> str:
    """``path`` as records hold it: relative to the working directory where it lies below it (as the
    configs' data paths are), so that no record holds a machine's paths; else as it is."""
    absolute, here = Path(os.path.abspath(path)), Path.cwd()
    return str(absolute.relative_to(here)) if absolute.is_relative_to(here) else str(path)


def portable_command(command: list) -> str:
    """A command line as records hold it: shell-quoted, each absolute path below the working directory
    made relative to it (the plugin's folder, given to fairseq as --user-dir, and any other)."""
    return shlex.join(portable_path(arg) if os.path.isabs(arg) else arg for arg in map(str, command))


class ResultError(ValueError):
    pass


class Record(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)


class Counts(Record):
    """phm_layers.count_parameters's counts as ParameterCount.as_dict writes them: four
    counts and the two derived from them (``dense_*``: every PHM or quaternion layer counted as the
    nn.Linear it stands for), which must agree with them."""

    total: int
    trainable: int
    embeddings: int
    dense_total: int
    without_embeddings: int
    dense_without_embeddings: int

    @classmethod
    def of(cls, count: ParameterCount, **more):
        return cls(**count.as_dict(), **more)

    @model_validator(mode="after")
    def _derived_counts_agree(self):
        derived = ParameterCount(self.total, self.trainable, self.embeddings, self.dense_total).as_dict()
        for name in ("without_embeddings", "dense_without_embeddings"):
            if getattr(self, name) != derived[name]:
                raise ValueError(f"{name} is {getattr(self, name)}, but its counts make {derived[name]}")
        return self


class ModuleParameters(Counts):
    """The counts of one named submodule (Table 1 counts encoder.lstm, Table 5 encoder.layers)."""

    name: str


class Parameters(Counts):
    """The counts of the trained model, and of the config's count_module."""

    module: Optional[ModuleParameters] = None


class ExitAfterTraining(Record):
    """fairseq-train ended with an error after it had finished: its "done training" record was
    logged and checkpoint_last.pt holds the final update count. The training is complete."""

    returncode: int
    stderr_tail: list[str]


class Training(Record):
    command: str
    updates: int
    epochs: int  # epochs trained, over every fairseq-train process (TrainingLog.epochs_trained)
    train_seconds: float
    seconds_per_100_updates: Optional[float]
    words_per_second: Optional[float]
    final_train_loss: Optional[float]
    best_valid_loss: Optional[float]
    wall_seconds: float
    resumed_from_updates: int = 0
    # training loss every --log-interval updates and validation loss, as [updates, loss] pairs
    curve: dict[str, list[list[Number]]] = {}
    crashed_at_exit: Optional[ExitAfterTraining] = None
    data: Optional[str] = None  # the data it trained on, where that is not the config's (distillation)
    # where training stopped, over every process of a resumed run (fairseq's log): the last epoch
    # trained, the epoch of the best validation of --best-checkpoint-metric (valid_metric) and its
    # value, whether --patience ended it (else --max-epoch or --max-update), and the wall time of
    # every fairseq-train process (validation and checkpointing included)
    last_epoch: Optional[int] = None
    best_epoch: Optional[int] = None
    valid_metric: Optional[str] = None
    best_valid: Optional[float] = None
    stopped_early: Optional[bool] = None
    total_wall_seconds: Optional[float] = None
    # the machine's 1-minute load average while fairseq-train trained (commands.LoadAverage): its speed
    # is set against another run's only where both had the machine to themselves; None where phm-run
    # did not see every update (a resumed run) or recorded it before this field
    load_average: Optional[float] = None

    @property
    def checkpoint_best_epoch(self) -> Optional[int]:
        """The epoch of checkpoint_best.pt, which the scores come from. fairseq saves it again when a later
        epoch ties the best (checkpoint_utils compares with >=), while early stopping counts from the first
        (fairseq_cli.train compares with >): best_epoch. They differ only on a tie."""
        scores = self.curve.get(f"valid_{self.valid_metric}", [])
        if self.best_epoch is None or len(scores) < self.best_epoch:
            return self.best_epoch
        return max(epoch for epoch, (_, score) in enumerate(scores, start=1) if score == self.best_valid)


class Evaluation(Record):
    command: str
    metric: str  # "bleu" or "accuracy"
    score: float
    examples: int
    examples_per_second: Optional[float]
    seconds: Optional[float] = None
    checkpoint: Optional[str] = None  # the checkpoint it scored (checkpoint_best.pt, checkpointN.pt)
    epoch: Optional[int] = None  # set for evaluate.epochs: the end of this epoch
    updates: Optional[int] = None  # (evaluate.epochs) the updates of that checkpoint
    sacrebleu: Optional[str] = None  # bleu: sacrebleu's score line and signature
    chrf: Optional[float] = None  # bleu: sacrebleu's chrF of the same hypotheses
    chrf_signature: Optional[str] = None
    averaged: Optional[list[str]] = None  # evaluate.average_last: the checkpoints averaged
    load_average: Optional[float] = None  # the machine's while it evaluated, as Training.load_average
    accuracy: Optional[float] = None  # accuracy: phm-evaluate's report
    labels: Optional[list[str]] = None
    confusion: Optional[list[list[int]]] = None


class Teacher(Record):
    config: str
    run: str  # the teacher's run folder (same seed)
    fingerprint: str


class Distillation(Record):
    """Sequence-level knowledge distillation: the teacher translated the training source, its
    translations are the training targets (Kim & Rush, 2016)."""

    data: str  # the distilled data folder (in the teacher's run folder)
    generate_command: str
    preprocess_command: str
    examples: int


class Init(Record):
    command: str  # run before training; its checkpoint is where training starts (--finetune-from-model)
    checkpoint: str


class Environment(Record):
    date: str
    command: str
    git_commit: str
    python: str
    torch: str
    fairseq: Optional[str]
    phm_fairseq: str
    device: str
    threads: int
    cpu_capability: Optional[str] = None  # torch's CPU kernels; None: recorded before it was
    # the tracked files' changes from git_commit when it is marked +uncommitted (git diff HEAD)
    git_diff: Optional[str] = None
    # the variables that chose the commands' kernels (kernels.py; {} where each CPU chose its own);
    # None: recorded before they were pinned
    kernels: Optional[dict[str, str]] = None


class Result(Record):
    config: str  # the config file
    config_sha256: str  # of every value of the config: a run whose config changed is not "done"
    description: str
    paper: dict[str, Number]  # a count stays an int (721000), a score a float
    seed: int
    arch: Optional[str]
    prepare_command: Optional[str]
    parameters: Parameters
    training: Training
    evaluation: Evaluation  # of checkpoint_best.pt
    environment: Environment
    # the training fingerprint (see fingerprint.py); None in results written before it existed
    fingerprint: Optional[str] = None
    config_values: Optional[dict] = None  # the config as run (extends resolved, seed set)
    epoch_evaluations: list[Evaluation] = []  # evaluate.epochs
    teacher: Optional[Teacher] = None
    distillation: Optional[Distillation] = None
    init: Optional[Init] = None
    averaged_evaluation: Optional[Evaluation] = None  # evaluate.average_last
    # where a later phm-run evaluated again a model that an earlier one trained (the same fingerprint; its
    # config's evaluation changed): ``environment`` stays the training's, this is the evaluation's. None: the
    # training's own phm-run evaluated it (and records written before this field)
    evaluated_in: Optional[Environment] = None
    schema_version: int = SCHEMA_VERSION

    def write(self, path: Path) -> None:
        """Written whole or not at all: a run interrupted here leaves no half result."""
        path = Path(path)
        partial = path.with_name(path.name + ".partial")
        text = json.dumps(self.model_dump(mode="json"), indent=2, ensure_ascii=False)
        partial.write_text(text + "\n", encoding="utf-8")
        partial.replace(path)

    @classmethod
    def read(cls, path: Path) -> "Result":
        try:
            data = json.loads(Path(path).read_text(encoding="utf-8"))
        except (OSError, ValueError) as error:
            raise ResultError(f"{path}: cannot read it as a result: {error}") from None
        try:
            return cls.from_dict(data)
        except ResultError as error:
            raise ResultError(f"{path}: not a phm-run result of schema version {SCHEMA_VERSION}: {error}") from None

    @classmethod
    def from_dict(cls, data) -> "Result":
        if not isinstance(data, dict):
            raise ResultError(f"a result is a JSON object, not {type(data).__name__} {json.dumps(data)[:40]}")
        version = data.get("schema_version")
        if not isinstance(version, int):
            raise ResultError(f"no schema_version (phm-run writes {SCHEMA_VERSION})")
        if version > SCHEMA_VERSION:
            raise ResultError(
                f"schema_version {version!r} is newer than this phm-fairseq's ({SCHEMA_VERSION}): "
                "read it with the version that wrote it"
            )
        try:
            return cls.model_validate(data)
        except ValidationError as error:
            raise ResultError("; ".join(describe(e) for e in error.errors(include_url=False))) from None

    @property
    def evaluations(self) -> list:
        """Every evaluation of the run: checkpoint_best.pt's first, then one per evaluate.epochs entry,
        then the average of the last checkpoints' (evaluate.average_last)."""
        return [self.evaluation, *self.epoch_evaluations, *filter(None, [self.averaged_evaluation])]


def describe(error: dict) -> str:
    """One problem of a result, `where: what`."""
    *parents, last = error["loc"] or ("",)
    where = ".".join(map(str, [*parents, last]))
    if error["type"] == "extra_forbidden":
        return f"{'.'.join(map(str, parents)) or 'result'}: unknown field {last}"
    if error["type"] == "missing":
        return f"{where}: missing"
    message = error["msg"].removeprefix("Value error, ")
    return f"{where}: {message}" if error["type"] == "value_error" else f"{where}: {message}, got {error['input']!r}"
