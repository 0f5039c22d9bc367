"""Experiment configs: YAML files read with ``extends``, checked completely, as ``Config`` values.

The schema (docs/experiments.md has it with examples):

    extends: _base.yaml      another config (a path relative to this one) that this one overrides
                             key by key; null removes a key. Files named _*.yaml are bases, not run.
    description: str
    paper: {bleu|accuracy|parameters|seconds_per_100_updates|inference_seconds: number}
    data: str                the fairseq data folder (relative to the working directory)
    prepare: str             shell command that makes `data` when it holds no fairseq data
    seed: int                (default 1; phm-run --seeds S [S ...] replaces it)
    count_module: str        also count this submodule's parameters (e.g. encoder.lstm)
    train: {option: value}   fairseq-train options; `arch` is required
    evaluate:
      kind: bleu | accuracy
      reference: str         (bleu) the untokenized reference, one sentence a line
      generate: {option: value}  (bleu) fairseq-generate options
      subset: str            (accuracy) the split phm-evaluate scores (default test)
      epochs: [int, ...]     also evaluate the end-of-epoch checkpoints checkpointN.pt (0: the init checkpoint)
      average_last: int      also evaluate the average of the last N end-of-epoch checkpoints
    teacher: str             another config (relative to this one) whose run of the same seed
                             this one builds on; phm-run runs it first when it is not done
    distill: true | {option: value}   train on the teacher's translations of the training source
                             (sequence-level distillation); a mapping overrides the teacher's
                             beam and lenpen with fairseq-generate options
    init: {command: str, checkpoint: str}   a command run before training; training starts from
                             the checkpoint it writes (default "{run}/init.pt") through
                             fairseq-train --finetune-from-model

Option values and commands may use the placeholders {data} (the data folder), {run} (this run's
folder) and {teacher} (the teacher's run folder). An option whose value is true is a bare flag;
false or null leave it out.
"""

import difflib
import hashlib
import json
import re
from dataclasses import dataclass, field, replace
from pathlib import Path

import yaml

PLACEHOLDERS = ("data", "run", "teacher")
PAPER_KEYS = ("bleu", "accuracy", "parameters", "seconds_per_100_updates", "inference_seconds")
EVALUATE_KEYS = {
    "bleu": ("kind", "reference", "generate", "epochs", "average_last"),
    "accuracy": ("kind", "subset", "epochs", "average_last"),
}
# train options that phm-run sets itself: a config that gives them would be silently overridden
SET_BY_PHM_RUN = {
    "user-dir": "phm-run passes the plugin's folder",
    "save-dir": "phm-run saves checkpoints in the run's folder (RUNS/<config>/seed<S>/checkpoints)",
    "seed": "set the top-level `seed` (or phm-run --seeds)",
    "log-format": "phm-run reads fairseq's JSON log (--log-format json)",
    "restore-file": "phm-run resumes from the run's own checkpoint_last.pt; start from another model with `init`",
    "finetune-from-model": "use `init: {command: ..., checkpoint: ...}`",
}
GENERATE_SET_BY_PHM_RUN = {
    "user-dir": "phm-run passes the plugin's folder",
    "path": "phm-run evaluates the run's checkpoint_best.pt (and checkpointN.pt for evaluate.epochs)",
}


class ConfigError(ValueError):
    pass


MAX_SEED = 2**32 - 1  # numpy's seeds, which fairseq sets from --seed, are 32-bit unsigned


def is_seed(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= MAX_SEED


@dataclass(frozen=True)
class Evaluate:
    kind: str  # "bleu" (fairseq-generate + sacrebleu) or "accuracy" (phm-evaluate)
    reference: str = None
    generate: dict = field(default_factory=dict)
    subset: str = "test"
    epochs: tuple = ()
    average_last: int = None  # also score the average of the last N epoch checkpoints


@dataclass(frozen=True)
class Init:
    command: str
    checkpoint: str = "{run}/init.pt"


@dataclass(frozen=True)
class Config:
    path: Path  # the config file, resolved
    values: dict  # every value as read (extends resolved), with the seed in force
    data: str
    train: dict
    evaluate: Evaluate
    seed: int = 1
    description: str = ""
    paper: dict = field(default_factory=dict)
    prepare: str = None
    count_module: str = None
    teacher: Path = None  # the teacher's config file, resolved
    distill: dict = None  # None: no distillation; else fairseq-generate options over the teacher's search
    init: Init = None

    @property
    def arch(self) -> str:
        return self.train["arch"]

    def with_seed(self, seed) -> "Config":
        if seed is None or seed == self.seed:
            return self
        return replace(self, seed=seed, values={**self.values, "seed": seed})

    @property
    def sha256(self) -> str:
        """Of every value: a result whose config had another value in any key is not up to date."""
        return hashlib.sha256(json.dumps(self.values, sort_keys=True).encode()).hexdigest()


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


def _close(name, choices) -> str:
    match = difflib.get_close_matches(str(name), list(choices), n=1, cutoff=0.6)
    return f" (did you mean {match[0]!r}?)" if match else ""


def _unknown_keys(mapping: dict, known, where: str, problems: list) -> None:
    for key in mapping:
        if key not in known:
            problems.append(f"{where}{key}: unknown key{_close(key, known)}; known keys: {', '.join(known)}")


def placeholders_in(value: str) -> list:
    return re.findall(r"\{(\w+)\}", value)


def fill(value, fields: dict) -> str:
    """``value`` with {data}, {run} and {teacher} replaced; other braces (e.g. JSON) are left as they are."""
    return re.sub(r"\{(\w+)\}", lambda m: str(fields[m.group(1)]) if m.group(1) in fields else m.group(0), str(value))


def _check_value(value, where: str, problems: list, has_teacher: bool) -> None:
    if isinstance(value, (dict, list)):
        problems.append(f"{where}: expected one value (a string, number or true/false), got {value!r}")
        return
    for name in placeholders_in(str(value)) if isinstance(value, str) else ():
        if name not in PLACEHOLDERS:
            problems.append(
                f"{where}: unknown placeholder {{{name}}}{_close(name, PLACEHOLDERS)}; "
                f"known: {', '.join('{' + p + '}' for p in PLACEHOLDERS)}"
            )
        elif name == "teacher" and not has_teacher:
            problems.append(f"{where}: {{teacher}} needs a `teacher` config")


def _check_options(options, where: str, problems: list, reserved: dict, has_teacher: bool) -> dict:
    if not isinstance(options, dict):
        problems.append(f"{where}: expected a mapping of options, got {options!r}")
        return {}
    for key, value in options.items():
        if not isinstance(key, str):
            problems.append(f"{where}.{key}: an option name is a string")
            continue
        if key.startswith("-"):
            problems.append(f"{where}.{key}: write the option without its dashes ({key.lstrip('-')})")
        if key.lstrip("-") in reserved:
            problems.append(f"{where}.{key}: {reserved[key.lstrip('-')]}; remove it")
        _check_value(value, f"{where}.{key}", problems, has_teacher)
    return options


def _check_string(config: dict, key: str, problems: list, has_teacher: bool, where: str = "") -> None:
    if key in config:
        if not isinstance(config[key], str):
            problems.append(f"{where}{key}: expected a string, got {config[key]!r}")
        else:
            _check_value(config[key], f"{where}{key}", problems, has_teacher)


def _check_evaluate(spec, problems: list, has_teacher: bool):
    if not isinstance(spec, dict):
        problems.append(f"evaluate: expected a mapping with `kind`, got {spec!r}")
        return None
    kind = spec.get("kind")
    if kind not in EVALUATE_KEYS:
        problems.append(f"evaluate.kind: must be one of {', '.join(EVALUATE_KEYS)}, not {kind!r}")
        return None
    _unknown_keys(spec, EVALUATE_KEYS[kind], "evaluate.", problems)
    if kind == "bleu":
        if "reference" not in spec:
            problems.append(
                "evaluate.reference: missing (the untokenized reference file of the evaluated split, "
                'e.g. "{data}/raw/test.en")'
            )
        _check_string(spec, "reference", problems, has_teacher, "evaluate.")
        _check_options(spec.get("generate", {}), "evaluate.generate", problems, GENERATE_SET_BY_PHM_RUN, has_teacher)
    else:
        _check_string(spec, "subset", problems, has_teacher, "evaluate.")
    epochs = spec.get("epochs", [])
    if not isinstance(epochs, list) or not all(type(e) is int and e >= 0 for e in epochs):
        problems.append(f"evaluate.epochs: expected a list of epoch numbers (e.g. [1, 2, 4]), got {epochs!r}")
        epochs = []
    average_last = spec.get("average_last")
    if average_last is not None and (type(average_last) is not int or average_last < 2):
        problems.append(f"evaluate.average_last: expected a number of checkpoints (2 or more), got {average_last!r}")
        average_last = None
    values = {
        k: v for k, v in spec.items() if k in EVALUATE_KEYS[kind] and k not in ("epochs", "average_last", "generate")
    }
    return Evaluate(
        **values,
        generate=dict(spec.get("generate") or {}),
        epochs=tuple(sorted(set(epochs))),
        average_last=average_last,
    )


KEYS = (
    "description",
    "paper",
    "data",
    "prepare",
    "seed",
    "count_module",
    "train",
    "evaluate",
    "teacher",
    "distill",
    "init",
)


def check(values: dict, path: Path) -> Config:
    """A Config from a config's mapping, or a ConfigError that lists every problem of it."""
    problems = []
    _unknown_keys(values, KEYS, "", problems)
    has_teacher = "teacher" in values
    for key in ("data", "train", "evaluate"):
        if key not in values:
            problems.append(f"{key}: missing (every config has data, train and evaluate)")
    for key in ("description", "data", "prepare", "count_module", "teacher"):
        _check_string(values, key, problems, has_teacher)
    seed = values.get("seed", 1)
    if not is_seed(seed):
        problems.append(f"seed: expected an integer from 0 to {MAX_SEED} (fairseq's and numpy's seeds), got {seed!r}")
    paper = values.get("paper", {})
    if not isinstance(paper, dict):
        problems.append(f"paper: expected a mapping of the paper's figures, got {paper!r}")
        paper = {}
    _unknown_keys(paper, PAPER_KEYS, "paper.", problems)
    for key, value in paper.items():
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            problems.append(f"paper.{key}: expected a number, got {value!r}")

    train = _check_options(values.get("train", {}), "train", problems, SET_BY_PHM_RUN, has_teacher)
    if "train" in values and not train.get("arch"):
        problems.append("train.arch: missing (the fairseq architecture, e.g. phm_transformer_iwslt)")
    evaluate = _check_evaluate(values["evaluate"], problems, has_teacher) if "evaluate" in values else None
    if evaluate and evaluate.average_last:
        kept = train.get("keep-last-epochs")
        if train.get("no-epoch-checkpoints"):
            problems.append(
                "evaluate.average_last needs fairseq's end-of-epoch checkpoints (checkpointN.pt): "
                "set train.no-epoch-checkpoints: false"
            )
        if isinstance(kept, int) and 0 <= kept < evaluate.average_last:
            problems.append(
                f"evaluate.average_last {evaluate.average_last}: train.keep-last-epochs {kept} keeps fewer "
                "epoch checkpoints"
            )
    if evaluate and evaluate.epochs:
        if train.get("no-epoch-checkpoints"):
            problems.append(
                "evaluate.epochs needs fairseq's end-of-epoch checkpoints (checkpointN.pt): "
                "set train.no-epoch-checkpoints: false"
            )
        if 0 in evaluate.epochs and not values.get("init"):
            problems.append(
                "evaluate.epochs: epoch 0 is the init checkpoint (the model before any training), "
                "but the config has no init"
            )
        if isinstance(train.get("max-epoch"), int) and max(evaluate.epochs) > train["max-epoch"]:
            problems.append(
                f"evaluate.epochs: epoch {max(evaluate.epochs)} is past train.max-epoch {train['max-epoch']}"
            )

    teacher = None
    if isinstance(values.get("teacher"), str):
        teacher = (path.parent / values["teacher"]).resolve()
        if not teacher.is_file():
            problems.append(f"teacher: no config file {teacher}")
        elif teacher == path.resolve():
            problems.append("teacher: a config cannot be its own teacher")
    distill = values.get("distill", False)
    if distill is True:
        distill = {}
    elif distill is False or distill is None:
        distill = None
    elif isinstance(distill, dict):
        _check_options(distill, "distill", problems, GENERATE_SET_BY_PHM_RUN, has_teacher)
    else:
        problems.append(f"distill: expected true, false or a mapping of fairseq-generate options, got {distill!r}")
        distill = None
    if distill is not None:
        if not has_teacher:
            problems.append("distill: needs a `teacher` config, whose model translates the training source")
        if evaluate and evaluate.kind != "bleu":
            problems.append("distill: sequence-level distillation is for translation (evaluate.kind bleu)")
    init = values.get("init")
    if init is not None:
        if not isinstance(init, dict) or "command" not in init:
            problems.append(f'init: expected {{command: "...", checkpoint: "{{run}}/init.pt"}}, got {init!r}')
            init = None
        else:
            _unknown_keys(init, ("command", "checkpoint"), "init.", problems)
            for key in ("command", "checkpoint"):
                _check_string(init, key, problems, has_teacher, "init.")
            init = Init(**{k: v for k, v in init.items() if k in ("command", "checkpoint")})

    if problems:
        raise ConfigError(f"{path}:\n" + "\n".join(f"  {problem}" for problem in problems))
    return Config(
        path=path,
        values=dict(values, seed=seed),
        data=values["data"],
        train=dict(train),
        evaluate=evaluate,
        seed=seed,
        description=values.get("description", ""),
        paper=dict(paper),
        prepare=values.get("prepare"),
        count_module=values.get("count_module"),
        teacher=teacher,
        distill=distill,
        init=init,
    )


def load_config(path) -> Config:
    """The config at ``path``, checked (keys, types, placeholders; fairseq's own checks are in
    commands.check_with_fairseq)."""
    path = Path(path).resolve()
    return check(read_config(path), path)


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
