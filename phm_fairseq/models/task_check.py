"""Each model family trains on its own kind of task: refused at build time, with the task it needs,
instead of a traceback at the first batch or after a whole epoch."""

from fairseq.tasks import TASK_REGISTRY


def task_name(task) -> str:
    return next((name for name, kind in TASK_REGISTRY.items() if kind is type(task)), type(task).__name__)


def require_task(args, task, needed: type, name: str, what: str) -> None:
    """Refuses ``task`` unless it is a ``needed`` (registered as ``name``)."""
    if not isinstance(task, needed):
        raise ValueError(
            f"--arch {args.arch} is {what}: it trains with --task {name} (its data: {needed.__doc__.split('.')[0]}), "
            f"not --task {task_name(task)}"
        )


def require_translation_task(args, task) -> None:
    """A sequence-to-sequence model needs source and target dictionaries: the classification tasks have one."""
    from ..tasks.classification import ClassificationTask

    if isinstance(task, ClassificationTask) or getattr(task, "target_dictionary", None) is None:
        raise ValueError(
            f"--arch {args.arch} is a translation (sequence-to-sequence) model: it trains with --task translation "
            f"(source and target sentences), not --task {task_name(task)}"
        )
