"""Every config of a phm-run command line, checked completely before anything runs: its keys and
values (config.py), its options through fairseq-train's and fairseq-generate's own parsers, and,
where its data is prepared, its model built as fairseq-train builds it. Every problem of every
config is listed at once.
"""

import contextlib
import difflib
import io
from pathlib import Path

from .commands import fairseq_generate_command, fairseq_train_command, options
from .config import ConfigError, expand, load_config
from .data import is_prepared
from .fairseq_train import training_arguments
from .run_folder import RunFolder

# the data path given to fairseq's parsers when checking: they only parse, they read no data
PARSE_ONLY_DATA = "DATA"


def check_all(paths, runs_dir: Path, seeds=None) -> list:
    """Every config of the command line (and every teacher they name) checked completely: the jobs as
    (config, seed), or a ConfigError that lists every problem found."""
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
            run = RunFolder.of(path, runs_dir, config.seed).path
            fields = {"data": config.data, "run": str(run), "teacher": "TEACHER"}
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


def check_with_fairseq(config, fields: dict, extra_train: list = ()) -> None:
    """fairseq-train's and fairseq-generate's own parsers on the config's options, with the plugin
    imported: unknown options, bad values and unknown architectures are found before anything
    runs. Nothing is built and no data is read (the data may not be prepared yet)."""
    import phm_fairseq  # noqa: F401  (registers the plugin's models, tasks and criterions)

    train = training_arguments(fairseq_train_command(PARSE_ONLY_DATA, *extra_train, *options(config.train, fields)))
    problems = [parse("get_training_parser", train, "train", config.train)[1]]
    searches = {"evaluate.generate": config.evaluate.generate if config.evaluate.kind == "bleu" else None}
    searches["distill"] = config.distill
    for what, search in searches.items():
        if search:
            generate = fairseq_generate_command(PARSE_ONLY_DATA, "checkpoint.pt", *options(search, fields))
            problems.append(parse("get_generation_parser", generate[1:], what, search)[1])
    problems = [p for p in problems if p]
    if problems:
        raise ConfigError(f"{config.path}:\n" + "\n".join(f"  {problem}" for problem in problems))


def parse(parser_name: str, args: list, what: str, given: dict) -> tuple:
    """fairseq's own parser on ``args``: (the parsed options, None), or (None, its error message). ``given``: the
    config's options, to name the closest known option of one that fairseq does not know."""
    from fairseq import options as fairseq_options

    parser = getattr(fairseq_options, parser_name)()
    captured = io.StringIO()
    try:
        with contextlib.redirect_stderr(captured):
            return fairseq_options.parse_args_and_arch(parser, input_args=args), None
    except SystemExit as exit:
        lines = [line for line in captured.getvalue().split("\n") if line.strip()]
        message = lines[-1].split(" error: ", 1)[-1] if lines else str(exit)
        known = [option[2:] for option in parser._option_string_actions if option.startswith("--")]
        hints = []
        for key in given if message.startswith("unrecognized arguments") else ():
            if key not in known:
                match = difflib.get_close_matches(key, known, n=1, cutoff=0.75)
                close = f" (did you mean {match[0]!r}?)" if match else ""
                hints.append(f"{what}.{key} is not a fairseq option{close}")
        return None, f"{what}: fairseq rejects the options: {message}" + "".join(f"; {hint}" for hint in hints)
    except Exception as error:  # e.g. a value that an option's type refuses deep in fairseq
        return None, f"{what}: fairseq rejects the options: {type(error).__name__}: {error}"


def check_model(config, fields: dict) -> None:
    """Builds the config's model as fairseq-train does (its task set up on the prepared data's
    dictionaries; no training data is read): sizes that the model refuses, e.g. a --phm-n that does
    not divide a layer's dimensions, are found before anything runs, not after hours of other runs."""
    from fairseq import options as fairseq_options
    from fairseq import tasks

    import phm_fairseq  # noqa: F401  (registers the plugin's models, tasks and criterions)

    args = training_arguments(fairseq_train_command(config.data, *options(config.train, fields)))
    parsed = fairseq_options.parse_args_and_arch(fairseq_options.get_training_parser(), input_args=args)
    try:
        tasks.setup_task(parsed).build_model(parsed)
    except Exception as error:  # the model's own refusal, whatever its type: shown as it is
        raise ConfigError(
            f"{config.path}:\n  train: fairseq cannot build the model {config.arch}: {type(error).__name__}: {error}"
        ) from None
