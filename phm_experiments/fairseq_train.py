"""fairseq-train as phm-run runs it: fairseq's own training, whose early stopping survives a resume
(and whose half-precision steps may overflow on a machine without CUDA: cpu_half_precision.py).

    python -m phm_experiments.fairseq_train DATA [fairseq-train options]

fairseq's ``--patience`` counts the validations without improvement in attributes of the function
``fairseq_cli.train.should_stop_early`` (``best``, ``num_runs``), which no checkpoint saves: a resumed
fairseq-train starts counting again from its first validation, against that validation's score
instead of the best so far. A run resumed every few epochs (phm-run across sessions) would then stop
later than the same run uninterrupted, or never. Here every checkpoint also carries that count
(extra_state["should_stop_early"]), and a resumed training starts from the count of the checkpoint
it resumes, so that it stops exactly where an uninterrupted one does.

fairseq also groups the sentences into batches once per process, with the seed of the epoch the
process starts at (``FairseqTask.get_batch_iterator``: ``numpy_seed(seed + epoch)`` breaks the ties
between sentences of equal length), then keeps those batches for every later epoch and only shuffles
their order. A training resumed at epoch e would train on other batches than the uninterrupted one
from epoch e on: the same seed would give other bits. Here the batches are always those of epoch 1
(``batches_of_the_first_epoch``), as the uninterrupted training makes them.
"""

import functools
import inspect
import logging
import os
import sys
from pathlib import Path

from .run_folder import LAST

EXTRA_STATE_KEY = "should_stop_early"


def early_stopping_state(checkpoint: Path):
    """{"best": float, "num_runs": int} of fairseq's early stopping when ``checkpoint`` was saved by
    this launcher; None where there is no such checkpoint or it carries no count."""
    import torch

    import phm_fairseq.checkpoints  # noqa: F401  (safe loading of the plugin's checkpoints)

    if not Path(checkpoint).is_file():
        return None
    try:
        state = torch.load(checkpoint, map_location="cpu", weights_only=True, mmap=True)
    except Exception:  # truncated or not a checkpoint: fairseq itself will say so when it loads it
        return None
    saved = (state.get("extra_state") or {}).get(EXTRA_STATE_KEY)
    return dict(saved) if saved and saved.get("best") is not None else None


def batches_of_the_first_epoch() -> None:
    """Makes fairseq's training batches, where one iterator serves every epoch, those of epoch 1 whatever
    epoch a process starts at (see the module's docstring). Iterators that fairseq makes anew each epoch
    (sharded data, --update-epoch-batch-itr, --rebuild-batches) already take that epoch's seed either way."""
    from fairseq.tasks import FairseqTask

    get_batch_iterator = FairseqTask.get_batch_iterator
    if getattr(get_batch_iterator, "first_epochs_batches", False):
        return
    signature = inspect.signature(get_batch_iterator)

    @functools.wraps(get_batch_iterator)
    def with_the_first_epochs_batches(task, *args, **kwargs):
        call = signature.bind(task, *args, **kwargs)
        call.apply_defaults()
        options = call.arguments
        epoch, dataset = options["epoch"], options["dataset"]
        made_once = (
            not options["disable_iterator_cache"]
            and not options["update_epoch_batch_itr"]
            and not getattr(task.cfg, "rebuild_batches", False)
            and task.can_reuse_epoch_itr(dataset)
        )
        if epoch <= 1 or not made_once or dataset in task.dataset_to_epoch_iter:
            return get_batch_iterator(*call.args, **call.kwargs)
        options["epoch"] = 1
        iterator = get_batch_iterator(*call.args, **call.kwargs)
        iterator.epoch = epoch  # where it goes on (a checkpoint's iterator state sets it again)
        dataset.set_epoch(epoch)
        return iterator

    with_the_first_epochs_batches.first_epochs_batches = True
    FairseqTask.get_batch_iterator = with_the_first_epochs_batches


# how phm-run starts it (commands.environment puts the run's interpreter first on PATH)
MODULE = "phm_experiments.fairseq_train"
COMMAND = ("python", "-m", MODULE)
EARLIER_MODULES = ("phm_fairseq.experiments.fairseq_train",)  # its name in runs recorded before the kit was a package


def training_arguments(command: list) -> list:
    """fairseq-train's arguments of a training command line, written either way: ``fairseq-train ARGS``
    or this launcher's ``python -m phm_experiments.fairseq_train ARGS``."""
    if command and Path(command[0]).name == "fairseq-train":
        return list(command[1:])
    if len(command) >= 3 and command[1] == "-m" and command[2] in (MODULE, *EARLIER_MODULES):
        return list(command[3:])
    raise ValueError(f"expected a fairseq-train command, got {' '.join(command)[:80]!r}")


def save_dir(argv: list) -> Path:
    """--save-dir of a fairseq-train command line (fairseq's default: checkpoints)."""
    for i, arg in enumerate(argv):
        if arg == "--save-dir" and i + 1 < len(argv):
            return Path(argv[i + 1])
        if arg.startswith("--save-dir="):
            return Path(arg.split("=", 1)[1])
    return Path("checkpoints")


def main(argv=None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    import torch
    from fairseq.trainer import Trainer

    if os.environ.get("PHM_DETERMINISTIC_ALGORITHMS") == "1":  # pinned kernels (kernels.py)
        # warn_only: an op without a deterministic kernel says so in the log instead of ending the run
        torch.use_deterministic_algorithms(True, warn_only=True)
    if os.environ.get("PHM_EXACT_SQRT") == "1":
        from .kernels import exact_sqrt

        exact_sqrt()

    # fairseq-train's log format, which phm-run reads (fairseq_cli/train.py sets it only where
    # nothing has configured logging before it)
    logging.basicConfig(
        format="%(asctime)s | %(levelname)s | %(name)s | %(message)s",
        datefmt="%Y-%m-%d %H:%M:%S",
        level=os.environ.get("LOGLEVEL", "INFO").upper(),
        stream=sys.stdout,
        force=True,
    )
    from fairseq_cli import train

    import phm_fairseq  # noqa: F401  (the plugin; --user-dir imports it again: a no-op)

    from . import cpu_half_precision

    cpu_half_precision.install()  # (changes nothing where there is CUDA)
    batches_of_the_first_epoch()
    state = early_stopping_state(save_dir(argv) / LAST)
    if state is not None:  # resuming: count on from where the checkpoint stopped counting
        train.should_stop_early.best = state["best"]
        train.should_stop_early.num_runs = state["num_runs"]

    save_checkpoint = Trainer.save_checkpoint

    def save_checkpoint_with_early_stopping(self, filename, extra_state):
        best = getattr(train.should_stop_early, "best", None)  # a float, or a numpy one: kept as a float
        counts = None if best is None else {"best": float(best), "num_runs": int(train.should_stop_early.num_runs)}
        return save_checkpoint(self, filename, {**extra_state, EXTRA_STATE_KEY: counts})

    Trainer.save_checkpoint = save_checkpoint_with_early_stopping
    sys.argv = ["fairseq-train", *argv]
    train.cli_main()


if __name__ == "__main__":
    main()
