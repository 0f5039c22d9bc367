"""result.json: the record of one run, written by phm-run and read by phm-collect.

One schema for writer and reader: ``Result.write`` stores these dataclasses as JSON with
``schema_version``; ``Result.read`` builds them back, and refuses a file it cannot read with a
message that says why. Fields added to the schema later are optional, so that results written
before them stay readable.
"""

import dataclasses
import json
import typing
from dataclasses import dataclass, field
from pathlib import Path

from phm_fairseq.modules.parameter_count import ParameterCount

from .config import Number

SCHEMA_VERSION = 1


class ResultError(ValueError):
    pass


@dataclass(frozen=True)
class ModuleParameters(ParameterCount):
    """The counts of one named submodule (Table 1 counts encoder.lstm, Table 5 encoder.layers)."""

    name: str

    def as_dict(self) -> dict:
        return {"name": self.name, **super().as_dict()}


@dataclass(frozen=True)
class Parameters(ParameterCount):
    """phm_fairseq.modules.count_parameters of the trained model; ``dense_*``: with every PHM or
    quaternion layer counted as the nn.Linear it stands for. Written as ParameterCount.as_dict
    writes it: the counts without embeddings beside the counts they derive from (checked against
    them on reading)."""

    module: typing.Optional[ModuleParameters] = None  # the config's count_module

    def as_dict(self) -> dict:
        return {**super().as_dict(), "module": None if self.module is None else self.module.as_dict()}


# what ParameterCount.as_dict writes beside its fields: its properties, derived from them
DERIVED_COUNTS = ("without_embeddings", "dense_without_embeddings")


@dataclass
class ExitAfterTraining:
    """fairseq-train ended with an error after it had finished: its "done training" record was
    logged and checkpoint_last.pt holds the final update count. The training is complete."""

    returncode: int
    stderr_tail: typing.List[str]


@dataclass
class Training:
    command: str
    updates: int
    epochs: int  # epochs trained, over every fairseq-train process (TrainingLog.epochs_trained)
    train_seconds: float
    seconds_per_100_updates: typing.Optional[float]
    words_per_second: typing.Optional[float]
    final_train_loss: typing.Optional[float]
    best_valid_loss: typing.Optional[float]
    wall_seconds: float
    resumed_from_updates: int = 0
    # training loss every --log-interval updates and validation loss, as [updates, loss] pairs
    curve: typing.Dict[str, typing.List[typing.List[float]]] = field(default_factory=dict)
    crashed_at_exit: typing.Optional[ExitAfterTraining] = None
    data: typing.Optional[str] = None  # the data it trained on, where that is not the config's (distillation)
    # where training stopped, over every process of a resumed run (fairseq's log): the last epoch
    # trained, the epoch of the best validation of --best-checkpoint-metric (valid_metric) and its
    # value, whether --patience ended it (else --max-epoch or --max-update), and the wall time of
    # every fairseq-train process (validation and checkpointing included)
    last_epoch: typing.Optional[int] = None
    best_epoch: typing.Optional[int] = None
    valid_metric: typing.Optional[str] = None
    best_valid: typing.Optional[float] = None
    stopped_early: typing.Optional[bool] = None
    total_wall_seconds: typing.Optional[float] = None


@dataclass
class Evaluation:
    command: str
    metric: str  # "bleu" or "accuracy"
    score: float
    examples: int
    examples_per_second: typing.Optional[float]
    seconds: typing.Optional[float] = None
    checkpoint: typing.Optional[str] = None  # the checkpoint it scored (checkpoint_best.pt, checkpointN.pt)
    epoch: typing.Optional[int] = None  # set for evaluate.epochs: the end of this epoch
    updates: typing.Optional[int] = None  # (evaluate.epochs) the updates of that checkpoint
    sacrebleu: typing.Optional[str] = None  # bleu: sacrebleu's score line and signature
    chrf: typing.Optional[float] = None  # bleu: sacrebleu's chrF of the same hypotheses
    chrf_signature: typing.Optional[str] = None
    averaged: typing.Optional[typing.List[str]] = None  # evaluate.average_last: the checkpoints averaged
    accuracy: typing.Optional[float] = None  # accuracy: phm-evaluate's report
    labels: typing.Optional[typing.List[str]] = None
    confusion: typing.Optional[typing.List[typing.List[int]]] = None


@dataclass
class Teacher:
    config: str
    run: str  # the teacher's run folder (same seed)
    fingerprint: str


@dataclass
class Distillation:
    """Sequence-level knowledge distillation: the teacher translated the training source, its
    translations are the training targets (Kim & Rush, 2016)."""

    data: str  # the distilled data folder (in the teacher's run folder)
    generate_command: str
    preprocess_command: str
    examples: int


@dataclass
class Init:
    command: str  # run before training; its checkpoint is where training starts (--finetune-from-model)
    checkpoint: str


@dataclass
class Environment:
    date: str
    command: str
    git_commit: str
    python: str
    torch: str
    fairseq: typing.Optional[str]
    phm_fairseq: str
    device: str
    threads: int
    cpu_capability: typing.Optional[str] = None  # torch's CPU kernels; None: recorded before it was


@dataclass
class Result:
    config: str  # the config file
    config_sha256: str  # of every value of the config: a run whose config changed is not "done"
    description: str
    paper: typing.Dict[str, Number]  # a count stays an int (721000), a score a float
    seed: int
    arch: typing.Optional[str]
    prepare_command: typing.Optional[str]
    parameters: Parameters
    training: Training
    evaluation: Evaluation  # of checkpoint_best.pt
    environment: Environment
    # the training fingerprint (see fingerprint.py); None in results written before it existed
    fingerprint: typing.Optional[str] = None
    config_values: typing.Optional[dict] = None  # the config as run (extends resolved, seed set)
    epoch_evaluations: typing.List[Evaluation] = field(default_factory=list)  # evaluate.epochs
    teacher: typing.Optional[Teacher] = None
    distillation: typing.Optional[Distillation] = None
    init: typing.Optional[Init] = None
    averaged_evaluation: typing.Optional[Evaluation] = None  # evaluate.average_last
    schema_version: int = SCHEMA_VERSION

    def to_dict(self) -> dict:
        return {**dataclasses.asdict(self), "parameters": self.parameters.as_dict()}

    def write(self, path: Path) -> None:
        """Written whole or not at all: a run interrupted here leaves no half result."""
        path = Path(path)
        partial = path.with_name(path.name + ".partial")
        partial.write_text(json.dumps(self.to_dict(), indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
        partial.replace(path)

    @classmethod
    def read(cls, path: Path) -> "Result":
        try:
            data = json.loads(Path(path).read_text(encoding="utf-8"))
        except (OSError, ValueError) as error:
            raise ResultError(f"{path}: cannot read it as a result: {error}") from None
        try:
            return cls.from_dict(data)
        except (TypeError, ValueError, KeyError) as error:
            raise ResultError(f"{path}: not a phm-run result of schema version {SCHEMA_VERSION}: {error}") from None

    @classmethod
    def from_dict(cls, data: dict) -> "Result":
        if not isinstance(data, dict):
            raise TypeError(f"a result is a JSON object, not {type(data).__name__} {json.dumps(data)[:40]}")
        version = data.get("schema_version")
        if not isinstance(version, int):
            raise ValueError(f"no schema_version (phm-run writes {SCHEMA_VERSION})")
        if version > SCHEMA_VERSION:
            raise ValueError(
                f"schema_version {version!r} is newer than this phm-fairseq's ({SCHEMA_VERSION}): "
                "read it with the version that wrote it"
            )
        return from_json(cls, data)

    @property
    def evaluations(self) -> list:
        """Every evaluation of the run: checkpoint_best.pt's first, then one per evaluate.epochs entry,
        then the average of the last checkpoints' (evaluate.average_last)."""
        return [self.evaluation, *self.epoch_evaluations, *filter(None, [self.averaged_evaluation])]


def from_json(kind, value):
    """``value`` (parsed JSON) as an instance of the type ``kind`` (one of the dataclasses above,
    or a type of their fields), checked field by field."""
    origin, arguments = typing.get_origin(kind), typing.get_args(kind)
    if origin is typing.Union:  # Optional[X], Number: the first type that takes the value
        if value is None and type(None) in arguments:
            return None
        *others, last = [a for a in arguments if a is not type(None)]
        for kind in others:
            try:
                return from_json(kind, value)
            except (TypeError, ValueError):
                pass
        return from_json(last, value)
    if dataclasses.is_dataclass(kind):
        if not isinstance(value, dict):
            raise TypeError(f"{kind.__name__}: expected an object, got {type(value).__name__}")
        hints = typing.get_type_hints(kind)
        names = {f.name for f in dataclasses.fields(kind)}
        derived = {}
        if issubclass(kind, ParameterCount):  # as_dict writes the counts derived from its fields too:
            # read, checked against the fields, and left to its properties
            missing = [name for name in DERIVED_COUNTS if name not in value]
            if missing:
                raise TypeError(f"{kind.__name__}: missing {', '.join(missing)}")
            derived = {name: from_json(int, value[name]) for name in DERIVED_COUNTS}
            value = {name: item for name, item in value.items() if name not in derived}
        unknown = set(value) - names
        if unknown:
            raise ValueError(f"{kind.__name__}: unknown field(s) {', '.join(sorted(unknown))}")
        built = kind(**{name: from_json(hints[name], item) for name, item in value.items()})
        for name, count in derived.items():
            if getattr(built, name) != count:
                raise ValueError(f"{kind.__name__}: {name} is {count}, but its counts make {getattr(built, name)}")
        return built
    if origin in (list, typing.List):
        if not isinstance(value, list):
            raise TypeError(f"expected a list, got {type(value).__name__}")
        return [from_json(arguments[0], item) for item in value] if arguments else value
    if origin in (dict, typing.Dict):
        if not isinstance(value, dict):
            raise TypeError(f"expected an object, got {type(value).__name__}")
        return {key: from_json(arguments[1], item) for key, item in value.items()} if arguments else value
    if kind is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise TypeError(f"expected a number, got {value!r}")
        return float(value)
    if kind in (int, str, bool) and (not isinstance(value, kind) or (kind is int and isinstance(value, bool))):
        raise TypeError(f"expected {kind.__name__}, got {value!r}")
    return value
