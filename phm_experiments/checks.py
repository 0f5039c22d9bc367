"""Every config of a phm-run command line, checked completely before anything runs: its keys and
values (config.py), its options through fairseq-train's and fairseq-generate's own parsers, values
that fairseq takes but no training can use, and, where its data is prepared, its model built and
validated once as fairseq-train would do it. Every problem of every config is listed at once.
"""

import ast
import contextlib
import difflib
import io
from pathlib import Path

from .commands import fairseq_generate_command, fairseq_train_command, options
from .config import ConfigError, expand, load_config
from .data import is_prepared
from .distill import refused
from .fairseq_train import training_arguments
from .run_folder import RunFolder

# the data path given to fairseq's parsers when checking: they only parse, they read no data
PARSE_ONLY_DATA = "DATA"
# fairseq-train options that its parser takes of any sign, and that no optimiser can use below these
AT_LEAST_ZERO = ("weight-decay", "adam-eps", "momentum", "clip-norm", "warmup-updates")


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
            if is_prepared(Path(config.data)):  # else its dictionaries are not there yet: checked once prepared
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
    runs; then the values that the parser takes but no training can use. Nothing is built and no
    data is read (the data may not be prepared yet)."""
    import phm_fairseq  # noqa: F401  (registers the plugin's models, tasks and criterions)

    train = training_arguments(fairseq_train_command(PARSE_ONLY_DATA, *extra_train, *options(config.train, fields)))
    args, problem = parse("get_training_parser", train, "train", config.train)
    problems = [problem] if problem else training_problems(args)
    searches = {"evaluate.generate": config.evaluate.generate if config.evaluate.kind == "bleu" else None}
    searches["distill"] = config.distill
    problems += refused(config.distill)
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


def training_problems(args) -> list:
    """Values of fairseq-train's options (the config's, or fairseq's defaults) that its parser takes
    but no training can use: a learning rate of 0 or below, negative decay, epsilon, momentum, clipping
    or warm-up, Adam's betas outside [0, 1), and early stopping without the validations it counts."""
    problems = []
    if any(lr <= 0 for lr in args.lr):  # a list: some schedulers take one rate per phase ("0.25,0.1")
        shown = ",".join(map(str, args.lr))
        problems.append(f"train.lr {shown}: a learning rate must be above 0: no optimiser learns at 0 or below")
    for option in AT_LEAST_ZERO:
        value = getattr(args, option.replace("-", "_"), None)  # present where the chosen optimiser has it
        if isinstance(value, (int, float)) and value < 0:
            problems.append(f"train.{option} {value}: must be 0 or more")
    betas = getattr(args, "adam_betas", None)  # fairseq's default is a tuple, an option's value a string of one
    if betas is not None:
        try:
            betas = ast.literal_eval(betas) if isinstance(betas, str) else betas
            usable = len(betas) == 2 and all(0 <= beta < 1 for beta in betas)
        except (ValueError, TypeError, SyntaxError):
            usable = False
        if not usable:
            problems.append(f"train.adam-betas {args.adam_betas}: two numbers in [0, 1), e.g. '(0.9, 0.98)'")
    if args.patience > 0 and args.disable_validation:
        problems.append(
            f"train.patience {args.patience}: early stopping counts validations without improvement, and "
            "train.disable-validation turns validation off: remove one of the two"
        )
    return problems


def check_model(config, fields: dict) -> None:
    """Builds the config's model as fairseq-train does (its task set up on the prepared data's
    dictionaries; no training data is read) and validates it on one validation example: sizes that the
    model refuses (a --phm-n that does not divide a layer's dimensions), and a --best-checkpoint-metric
    that the validation never reports, are found before anything runs, not after hours of other runs."""
    from fairseq import options as fairseq_options
    from fairseq import tasks

    import phm_fairseq  # noqa: F401  (registers the plugin's models, tasks and criterions)

    args = training_arguments(fairseq_train_command(config.data, *options(config.train, fields)))
    parsed = fairseq_options.parse_args_and_arch(fairseq_options.get_training_parser(), input_args=args)
    try:
        task = tasks.setup_task(parsed)
        model = task.build_model(parsed)
    except Exception as error:  # the model's own refusal, whatever its type: shown as it is
        raise ConfigError(
            f"{config.path}:\n  train: fairseq cannot build the model {config.arch}: {type(error).__name__}: {error}"
        ) from None
    if parsed.disable_validation:
        return
    try:
        reported = validation_metrics(parsed, task, model)
    except Exception as error:  # fairseq-train's validation would fail the same way
        raise ConfigError(
            f"{config.path}:\n  train: fairseq cannot validate the model {config.arch} on its "
            f"{parsed.valid_subset} split: {type(error).__name__}: {error}"
        ) from None
    metric = parsed.best_checkpoint_metric
    if metric not in reported:
        enable = " (translation reports bleu with train.eval-bleu: true)" if metric == "bleu" else ""
        raise ConfigError(
            f"{config.path}:\n  train.best-checkpoint-metric {metric}: the validation of task {parsed.task} with "
            f"criterion {parsed.criterion} reports {', '.join(reported)}, not {metric}{enable}. fairseq-train "
            f"would stop at its first validation (KeyError: {metric!r}); checkpoint_best.pt and train.patience "
            "follow this metric: name one that the validation reports"
        )


def validation_metrics(args, task, model) -> list:
    """The figures that fairseq-train's validation reports (what --best-checkpoint-metric may name): those
    of one example of the first validation split, through the task's and the criterion's own reduction."""
    import torch
    from fairseq.logging import metrics

    subset = args.valid_subset.split(",")[0]
    task.load_dataset(subset, combine=False, epoch=1)
    dataset = task.dataset(subset)
    shortest = min(range(len(dataset)), key=dataset.num_tokens)
    criterion = task.build_criterion(args)
    model.eval()
    with torch.no_grad(), metrics.aggregate(new_root=True) as validation:
        *_, logging_output = task.valid_step(dataset.collater([dataset[shortest]]), model, criterion)
        task.reduce_metrics([logging_output], criterion)
    # fairseq-train logs a loss of -1 where a criterion logs none, and the update count
    return sorted({*validation.get_smoothed_values(), "loss", "num_updates"})
