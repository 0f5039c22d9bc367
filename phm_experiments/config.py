"""Experiment configs: YAML files read with ``extends`` and validated against one schema, ``Config``
(pydantic models: every key, its type and its meaning are declared once, here; ``phm-run --schema``
prints them, docs/experiments.md explains them with examples).

A config file is read strictly (a key given twice and YAML aliases are errors, with file and
line), its ``extends`` chain merged key by key (a null removes a key), then validated: unknown keys
at every level (with "did you mean"), types, the evaluation keys of its kind, placeholders and the
rules between keys. fairseq's own checks of the options are in commands.check_with_fairseq.

Option values and commands may use the placeholders {data} (the data folder), {run} (this run's
folder) and {teacher} (the teacher's run folder). An option whose value is true is a bare flag;
false or null leave it out.
"""

import difflib
import hashlib
import json
import os
import re
from pathlib import Path
from typing import Annotated, Any, Literal, Optional, Union

import yaml
from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    PrivateAttr,
    ValidationError,
    ValidationInfo,
    WithJsonSchema,
    field_validator,
)

PLACEHOLDERS = ("data", "run", "teacher")
MAX_SEED = 2**32 - 1  # numpy's seeds, which fairseq sets from --seed, are 32-bit unsigned
# options that phm-run sets itself: a config that gave them would be silently overridden
SET_BY_PHM_RUN = {
    "user-dir": "phm-run passes the plugin's folder",
    "save-dir": "phm-run saves checkpoints in the run's folder (RUNS/<config>/seed<S>/checkpoints)",
    "seed": "set the top-level `seed` (or phm-run --seeds)",
    "log-format": "phm-run reads fairseq's JSON log (--log-format json)",
    "restore-file": "phm-run resumes from the run's own checkpoint_last.pt; start from another model with `init`",
    "finetune-from-model": "use `init: {command: ..., checkpoint: ...}`",
}
# --best-checkpoint-metric's direction: fairseq keeps checkpoint_best.pt by the metric's lowest value
# unless --maximize-best-checkpoint-metric is given, whatever the metric is
LOWER_IS_BETTER = ("loss", "nll_loss", "ppl", "wer")
HIGHER_IS_BETTER = ("bleu", "accuracy", "acc", "chrf", "f1")
GENERATE_SET_BY_PHM_RUN = {
    "user-dir": "phm-run passes the plugin's folder",
    "path": "phm-run evaluates the run's checkpoint_best.pt (and checkpointN.pt for evaluate.epochs)",
}


class ConfigError(ValueError):
    pass


def is_seed(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= MAX_SEED


def placeholders_in(value: str) -> list:
    return re.findall(r"\{(\w+)\}", value)


def fill(value, fields: dict) -> str:
    """``value`` with {data}, {run} and {teacher} replaced; other braces (e.g. JSON) are left as they are."""
    return re.sub(r"\{(\w+)\}", lambda m: str(fields[m.group(1)]) if m.group(1) in fields else m.group(0), str(value))


def _close(name, choices) -> str:
    match = difflib.get_close_matches(str(name), list(choices), n=1, cutoff=0.6)
    return f" (did you mean {match[0]!r}?)" if match else ""


# -- the value types of the schema ----------------------------------------------------------------


def _known_placeholders(value: str) -> str:
    for name in placeholders_in(value):
        if name not in PLACEHOLDERS:
            known = ", ".join("{" + p + "}" for p in PLACEHOLDERS)
            raise ValueError(f"unknown placeholder {{{name}}}{_close(name, PLACEHOLDERS)}; known: {known}")
    return value


# a string that may hold {data}, {run} and {teacher}
Text = Annotated[str, AfterValidator(_known_placeholders)]


def options_without(reserved: dict):
    """Command-line options as a mapping: names without dashes and none that phm-run sets itself
    (``reserved``: name -> why); each value one string, number or true/false (true: a bare flag,
    false or null: left out). Every problem is reported, as lines ".name: problem"."""

    def check(options: dict) -> dict:
        problems = []
        for key, value in options.items():
            if key.startswith("-"):
                problems.append(f".{key}: write the option without its dashes ({key.lstrip('-')})")
            if key.lstrip("-") in reserved:
                problems.append(f".{key}: {reserved[key.lstrip('-')]}; remove it")
            if isinstance(value, (dict, list)):
                problems.append(f".{key}: expected one value (a string, number or true/false), got {value!r}")
            elif isinstance(value, str):
                try:
                    _known_placeholders(value)
                except ValueError as error:
                    problems.append(f".{key}: {error}")
        if problems:
            raise ValueError("\n".join(problems))
        return options

    return Annotated[
        dict[str, Any],
        AfterValidator(check),
        WithJsonSchema({"type": "object", "additionalProperties": {"type": ["string", "number", "boolean", "null"]}}),
    ]


Number = Union[int, float]  # an integer stays one (parameter counts)


class Section(BaseModel):
    """Strict: no unknown key, no conversion between types (a quoted "4" is not the number 4)."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)


class Paper(Section):
    """The paper's figures, shown beside the measured ones."""

    bleu: Optional[Number] = None
    accuracy: Optional[Number] = None
    parameters: Optional[Number] = None
    seconds_per_100_updates: Optional[Number] = None
    inference_seconds: Optional[Number] = None


class _Evaluation(Section):
    kind: str
    epochs: tuple[Annotated[int, Field(ge=0)], ...] = Field(
        (),
        description="also evaluate the end-of-epoch checkpoints checkpointN.pt (needs "
        "train.no-epoch-checkpoints: false; 0 is the init checkpoint, the model before any training)",
    )
    average_last: Optional[Annotated[int, Field(ge=2)]] = Field(
        None,
        description="also evaluate the average of the last N end-of-epoch checkpoints "
        "(needs train.keep-last-epochs of N or more)",
    )

    @field_validator("epochs", mode="before")
    @classmethod
    def _epoch_list(cls, epochs):
        if not isinstance(epochs, list):
            raise ValueError(f"expected a list of epoch numbers (e.g. [1, 2, 4]), got {epochs!r}")
        return tuple(sorted(set(epochs)))


class BleuEvaluation(_Evaluation):
    """fairseq-generate, then sacrebleu's BLEU and chrF on the detokenized output."""

    kind: Literal["bleu"]
    reference: Text = Field(
        description='the untokenized reference of the evaluated split, one sentence a line (e.g. "{data}/raw/test.en")'
    )
    generate: options_without(GENERATE_SET_BY_PHM_RUN) = Field(
        default_factory=dict, description="fairseq-generate options (phm-run sets user-dir and path)"
    )


class AccuracyEvaluation(_Evaluation):
    """phm-evaluate, for the classification tasks."""

    kind: Literal["accuracy"]
    subset: Text = Field("test", description="the split phm-evaluate scores")


class Init(Section):
    """A command run before training; training starts from the checkpoint it writes
    (fairseq-train --finetune-from-model)."""

    command: Text = Field(description="a bash command line")
    checkpoint: Text = Field("{run}/init.pt", description="the checkpoint the command writes")


def teacher_file(path: Path, teacher: str) -> Path:
    """The teacher's config file: ``teacher`` is relative to the config at ``path``."""
    return (path.parent / teacher).resolve()


def _resolve_teacher(teacher, info: ValidationInfo):
    if not isinstance(teacher, str):
        raise ValueError(f"expected the path of another config, got {teacher!r}")
    return teacher_file(info.context["path"], teacher)


def _distill_options(distill):
    if distill is True:
        return {}
    if distill is False or distill is None:
        return None
    if not isinstance(distill, dict):
        raise ValueError(f"expected true, false or a mapping of fairseq-generate options, got {distill!r}")
    return distill


class Config(Section):
    """An experiment: its data, its fairseq-train options and how it is evaluated.

    Made by load_config, which reads the file (extends resolved) and validates it; ``path`` is the
    file, ``values`` every value as read, with the seed in force (what fingerprints and
    config_sha256 are taken of)."""

    description: str = Field("", description="shown in reports")
    paper: Paper = Field(default_factory=Paper, description="the paper's figures, shown beside ours")
    data: Text = Field(description="the fairseq data folder, relative to the working directory")
    prepare: Optional[Text] = Field(
        None, description="a bash command line that makes `data`; run when `data` holds no fairseq data"
    )
    seed: Annotated[int, Field(ge=0, le=MAX_SEED)] = Field(
        1, description="fairseq-train's --seed, 0 to 2^32 - 1 (phm-run --seeds S [S ...] replaces it)"
    )
    count_module: Optional[str] = Field(
        None, description="also count this submodule's parameters (a dotted name, e.g. encoder.lstm)"
    )
    train: options_without(SET_BY_PHM_RUN) = Field(
        description="fairseq-train options without their dashes; `arch` is required"
    )
    evaluate: Union[BleuEvaluation, AccuracyEvaluation] = Field(discriminator="kind")
    teacher: Optional[Annotated[Path, BeforeValidator(_resolve_teacher), WithJsonSchema({"type": "string"})]] = Field(
        None, description="another config (relative to this one) whose run of the same seed this one builds on"
    )
    distill: Optional[
        Annotated[
            options_without(GENERATE_SET_BY_PHM_RUN),
            BeforeValidator(_distill_options),
            WithJsonSchema({"anyOf": [{"type": "boolean"}, {"type": "object"}]}),
        ]
    ] = Field(
        None,
        description="true: train on the teacher's translations of the training source (sequence-level "
        "distillation); a mapping of fairseq-generate options instead of true overrides the teacher's beam and lenpen",
    )
    init: Optional[Init] = None

    _path: Path = PrivateAttr()
    _values: dict = PrivateAttr()

    @property
    def path(self) -> Path:
        return self._path

    @property
    def values(self) -> dict:
        return self._values

    @property
    def arch(self) -> str:
        return self.train["arch"]

    def with_seed(self, seed) -> "Config":
        if seed is None or seed == self.seed:
            return self
        config = self.model_copy(update={"seed": seed})
        config._values = {**self._values, "seed": seed}
        return config

    @property
    def sha256(self) -> str:
        """Of every value: a result whose config had another value in any key is not up to date."""
        return hashlib.sha256(json.dumps(self.values, sort_keys=True).encode()).hexdigest()


# -- reading a file ---------------------------------------------------------------------------------


def merge(base: dict, override: dict) -> dict:
    """``override`` on top of ``base``, mappings merged key by key; a null value drops the key."""
    merged = dict(base)
    for key, value in override.items():
        if value is None:
            merged.pop(key, None)
        elif isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = merge(merged[key], value)
        else:
            merged[key] = value
    return merged


class ConfigLoader(yaml.SafeLoader):
    """YAML's safe loader, stricter: a key given twice in one mapping is an error (PyYAML keeps the
    last silently), and so is an alias (*name): configs have no use for them, and nested aliases
    expand exponentially (a few lines can ask for gigabytes)."""

    def compose_node(self, parent, index):
        if self.check_event(yaml.AliasEvent):
            event = self.peek_event()
            raise yaml.composer.ComposerError(
                None,
                None,
                f"alias *{event.anchor}: configs do not use YAML aliases; write the value out",
                event.start_mark,
            )
        return super().compose_node(parent, index)

    def construct_mapping(self, node, deep=False):
        seen = {}
        for key_node, _value in node.value:
            key = self.construct_object(key_node, deep=True)
            if key in seen:
                raise yaml.constructor.ConstructorError(
                    f"while reading the mapping at line {node.start_mark.line + 1}",
                    node.start_mark,
                    f"key {key!r} given twice (lines {seen[key] + 1} and {key_node.start_mark.line + 1}): keep one",
                    key_node.start_mark,
                )
            seen[key] = key_node.start_mark.line
        return super().construct_mapping(node, deep)


def read_config(path: Path, seen=()) -> dict:
    """The mapping of a config file with its ``extends`` chain resolved."""
    if path in seen:
        raise ConfigError(f"{path}: `extends` loops back to itself")
    try:
        with open(path, encoding="utf-8") as file:  # marks in messages name the file
            config = yaml.load(file, Loader=ConfigLoader)
    except FileNotFoundError:
        raise ConfigError(f"{seen[-1] if seen else path}: no config file {path}") from None
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as error:
        raise ConfigError(f"{path}: cannot read the config: {error}") from None
    if config is None:
        config = {}
    if not isinstance(config, dict):
        raise ConfigError(
            f"{path}: a config is a mapping of keys (see docs/experiments.md), not a {type(config).__name__}"
        )
    if "extends" in config:
        base = config.pop("extends")
        if not isinstance(base, str):
            raise ConfigError(f"{path}: extends: expected the path of another config, got {base!r}")
        config = merge(read_config((path.parent / base).resolve(), (*seen, path)), config)
    return config


def _known_keys(model, loc: tuple) -> list:
    """The keys allowed where ``loc`` points (for "did you mean"), or [] where none are fixed."""
    for key in loc[:-1]:
        field = model.model_fields.get(key) if isinstance(key, str) else None
        if field is None:
            return []
        model = field.annotation
        if getattr(model, "__origin__", None) is Union:  # Optional[X]: X
            model = next(a for a in model.__args__ if a is not type(None))
        if not (isinstance(model, type) and issubclass(model, BaseModel)):
            return []
    return list(model.model_fields)


def describe(error: dict, values: dict) -> str:
    """One line of a validation error, in the config's own words: `where: what`."""
    # the discriminated union adds the kind to the location (evaluate.bleu.reference): drop it
    loc = error["loc"]
    if loc[:1] == ("evaluate",) and loc[1:2] in (("bleu",), ("accuracy",)):
        loc = loc[:1] + loc[2:]
    kind, message = error["type"], error["msg"]
    if loc and loc[-1] in ("int", "float"):  # a Number: one line for both members of the union
        loc, kind, message = loc[:-1], "number", "Input should be a number"
    where = ".".join(map(str, loc))
    if kind == "extra_forbidden":
        model = Config
        if loc[0] == "evaluate":
            model = BleuEvaluation if values.get("evaluate", {}).get("kind") == "bleu" else AccuracyEvaluation
            loc = loc[1:]
        known = _known_keys(model, loc)
        return f"{where}: unknown key{_close(loc[-1], known)}; known keys: {', '.join(known)}"
    if kind == "missing":
        if where == "evaluate.reference":
            return f'{where}: missing (the untokenized reference of the evaluated split, e.g. "{{data}}/raw/test.en")'
        return f"{where}: missing" + (" (every config has data, train and evaluate)" if len(loc) == 1 else "")
    if kind in ("union_tag_invalid", "union_tag_not_found"):
        return f"evaluate.kind: must be one of bleu, accuracy, not {error['input'].get('kind')!r}"
    if kind in ("model_type", "model_attributes_type", "dict_type"):
        return f"{where}: expected a mapping, got {error['input']!r}"
    if kind == "value_error":
        message = message.removeprefix("Value error, ")
        # lines ".key: problem" (options) belong to the key under `where`
        lines = message.split("\n")
        return "\n".join(f"{where}{li}" if li[0] == "." else f"{where}: {li}" if where else li for li in lines)
    if kind in ("greater_than_equal", "less_than_equal") and where == "seed":
        return f"seed: expected an integer from 0 to {MAX_SEED} (fairseq's and numpy's seeds), got {error['input']!r}"
    return f"{where}: {message[0].lower()}{message[1:]}, got {error['input']!r}"


def rules_between_keys(values: dict, path: Path) -> list:
    """The problems between keys, which no one key's type says: checked on the mapping as read, so
    that they are listed with the problems of single keys (each rule looks only at keys of the
    types it needs; the schema reports wrong types)."""
    problems = []
    mapping = lambda key: values.get(key) if isinstance(values.get(key), dict) else {}  # noqa: E731
    train, evaluate = mapping("train"), mapping("evaluate")
    if isinstance(values.get("train"), dict) and not train.get("arch"):
        problems.append("train.arch: missing (the fairseq architecture, e.g. phm_transformer_iwslt)")
    teacher = values.get("teacher")
    if teacher is None and "{teacher}" in json.dumps(values, default=str):
        problems.append("{teacher} is used, but the config has no `teacher`")
    if isinstance(teacher, str):
        if not teacher_file(path, teacher).is_file():
            problems.append(f"teacher: no config file {teacher_file(path, teacher)}")
        elif teacher_file(path, teacher) == path:
            problems.append("teacher: a config cannot be its own teacher")
    if values.get("distill") not in (None, False):
        if teacher is None:
            problems.append("distill: needs a `teacher` config, whose model translates the training source")
        if evaluate.get("kind") == "accuracy":
            problems.append("distill: sequence-level distillation is for translation (evaluate.kind bleu)")
    epochs = evaluate.get("epochs")
    epochs = sorted(epochs) if isinstance(epochs, list) and all(type(e) is int for e in epochs) else []
    average_last = evaluate.get("average_last") if type(evaluate.get("average_last")) is int else None
    if (epochs or average_last) and train.get("no-epoch-checkpoints"):
        problems.append(
            "evaluate.epochs and evaluate.average_last need fairseq's end-of-epoch checkpoints "
            "(checkpointN.pt): set train.no-epoch-checkpoints: false"
        )
    kept = train.get("keep-last-epochs")
    if average_last and type(kept) is int and 0 <= kept < average_last:
        problems.append(
            f"evaluate.average_last {average_last}: train.keep-last-epochs {kept} keeps fewer epoch checkpoints"
        )
    if 0 in epochs and values.get("init") is None:
        problems.append(
            "evaluate.epochs: epoch 0 is the init checkpoint (the model before any training), "
            "but the config has no init"
        )
    max_epoch = train.get("max-epoch")
    if epochs and type(max_epoch) is int and epochs[-1] > max_epoch:
        problems.append(f"evaluate.epochs: epoch {epochs[-1]} is past train.max-epoch {max_epoch}")
    problems += metric_direction(train, path)
    return problems


def metric_direction(train: dict, path: Path) -> list:
    """A best-checkpoint metric kept the wrong way round: a maximised loss (say, `best-checkpoint-metric:
    loss` over a base that maximises accuracy) or a minimised BLEU or accuracy would keep the worst
    checkpoint as checkpoint_best.pt, and report its score, without a word from fairseq."""
    metric = train.get("best-checkpoint-metric", "loss")  # fairseq's default
    maximize = train.get("maximize-best-checkpoint-metric", False)
    if not isinstance(metric, str) or not isinstance(maximize, bool):
        return []
    named = f"train.best-checkpoint-metric {metric}"
    if "best-checkpoint-metric" not in train:
        named = "train.best-checkpoint-metric not set (fairseq's default: loss)"
    lower = metric in LOWER_IS_BETTER or metric.endswith("_loss")
    if maximize and lower:
        where = os.path.relpath(set_in(path, "maximize-best-checkpoint-metric"), path.parent)
        return [
            f"{named} with train.maximize-best-checkpoint-metric: true (set in {where}): fairseq would keep "
            f"the checkpoint of the highest {metric} as checkpoint_best.pt. A lower {metric} is better: set "
            f"train.maximize-best-checkpoint-metric: false in {path.name}, or name a metric to maximise"
        ]
    if not maximize and metric in HIGHER_IS_BETTER:
        return [
            f"{named} without train.maximize-best-checkpoint-metric: fairseq would keep the checkpoint of the "
            f"lowest {metric} as checkpoint_best.pt. A higher {metric} is better: set "
            f"train.maximize-best-checkpoint-metric: true in {path.name}"
        ]
    return []


def set_in(path: Path, key: str) -> Path:
    """The file of ``path``'s extends chain whose `train` gives ``key`` last (the value in force)."""
    seen = []
    while path not in seen:  # read_config has read the chain already: this only names a file of it
        seen.append(path)
        try:
            with open(path, encoding="utf-8") as file:
                values = yaml.load(file, Loader=ConfigLoader) or {}
        except (OSError, yaml.YAMLError):
            break
        if not isinstance(values, dict):
            break
        train = values.get("train")
        if (isinstance(train, dict) and key in train) or not isinstance(values.get("extends"), str):
            return path
        path = (path.parent / values["extends"]).resolve()
    return seen[0]


def validate(values: dict, path: Path) -> Config:
    """A Config from a config's mapping, or a ConfigError that lists every problem of it."""
    problems = []
    try:
        config = Config.model_validate(values, context={"path": path})
    except ValidationError as error:
        problems = [line for e in error.errors(include_url=False) for line in describe(e, values).split("\n")]
    problems += rules_between_keys(values, path)
    if problems:
        raise ConfigError(f"{path}:\n" + "\n".join(f"  {p}" for p in dict.fromkeys(problems)))
    config._path = path
    config._values = dict(values, seed=config.seed)
    return config


def load_config(path) -> Config:
    """The config at ``path``, read and validated (fairseq's own checks are in commands.check_with_fairseq)."""
    path = Path(path).resolve()
    return validate(read_config(path), path)


def expand(paths) -> list:
    """Config files from files and folders (every *.yaml below a folder, in name order, less _*.yaml)."""
    configs = []
    for path in map(Path, paths):
        if path.is_dir():  # files named _*.yaml are bases for others to extend
            found = sorted(p for p in path.rglob("*.yaml") if not p.name.startswith("_"))
            if not found:
                raise ConfigError(f"{path}: no configs in this folder (files *.yaml not named _*.yaml)")
            configs += found
        elif path.is_file():
            configs.append(path)
        else:
            raise ConfigError(f"no config at {path}")
    return configs


EXTENDS = (
    "another config (a path relative to this one) that this one overrides key by key (mappings are "
    "merged, null removes a key); files named _*.yaml are bases, not run"
)


def _shown_type(annotation) -> str:
    """A field's type as the schema table shows it."""
    origin, args = getattr(annotation, "__origin__", None), getattr(annotation, "__args__", ())
    if origin is Union:
        shown = [_shown_type(a) for a in args if a is not type(None)]
        return "number" if shown[:2] == ["integer", "number"] else " or ".join(shown)
    if origin is Literal:
        return " or ".join(f"`{a}`" for a in args)
    if origin is tuple:
        return f"list of {_shown_type(args[0])}s"
    if origin is dict:
        return "mapping of options"
    if hasattr(annotation, "__metadata__"):  # Annotated[X, ...]
        return _shown_type(annotation.__origin__)
    return {str: "string", int: "integer", float: "number", Path: "path", bool: "true or false"}.get(
        annotation, getattr(annotation, "__name__", str(annotation))
    )


def _kind_of(model) -> str:
    kind = model.model_fields.get("kind")
    return f"kind {_shown_type(kind.annotation)}: " if kind and kind.annotation is not str else ""


def schema_table() -> str:
    """Every key of a config with its type, default and meaning, from the schema (phm-run --schema;
    docs/experiments.md shows it)."""
    rows = ["| key | type | default | meaning |", "|---|---|---|---|", f"| `extends` | path | | {EXTENDS} |"]

    def walk(model, prefix=""):
        for name, field in model.model_fields.items():
            variants = [
                a
                for a in (*getattr(field.annotation, "__args__", ()), field.annotation)
                if isinstance(a, type) and issubclass(a, BaseModel)
            ]
            if variants:
                meaning = " ".join(_kind_of(v) + " ".join(v.__doc__.split()) for v in variants)
                rows.append(f"| `{prefix}{name}` | mapping | | {meaning} |")
                names = list(dict.fromkeys(key for v in variants for key in v.model_fields))
                for key in names:
                    owners = [v for v in variants if key in v.model_fields]
                    only = f"({_kind_of(owners[0]).rstrip(': ')}) " if len(owners) < len(variants) else ""
                    row(f"{prefix}{name}.{key}", owners[0].model_fields[key], only)
            else:
                row(prefix + name, field)

    def row(key, field, only=""):
        shown = _shown_type(field.annotation) if key != "evaluate.kind" else "`bleu` or `accuracy`"
        if field.is_required():
            default = "required"
        elif field.default_factory is not None or field.default in (None, "", ()):
            default = ""
        else:
            default = f"`{field.default}`"
        rows.append(f"| `{key}` | {shown} | {default} | {only}{' '.join((field.description or '').split())} |")

    walk(Config)
    return "\n".join(rows) + "\n"
