"""A trained run's losses with dropout off: fairseq-validate of each seed's checkpoint_best.pt on the training
and validation sets, written beside the seed's result.json as eval_losses.json.

The fit report (report/fit.py) reads the training loss fairseq logged while it trained, with dropout on. A
narrow model pays more of its training loss to dropout than a wide one, so "fits better, validates worse"
could be dropout's doing; the training loss in eval mode (the same criterion, label smoothing included, no
dropout) settles it. The checkpoints are not committed, so this runs where the runs were trained, after them:

    python -m phm_experiments.eval_losses --runs-dir results/runs converged/multi30k_iwslt/phm_n4 \\
        converged/multi30k_iwslt/transformer_equal_params

Each run is named by its folder below --runs-dir, every seed of it with a checkpoint is measured (one whose
eval_losses.json exists is skipped). A checkpoint whose validation loss is not the record's at its best epoch
is not the record's checkpoint, and is refused. The commands run with the kernels pinned, as phm-run's.
"""

import argparse
import json
import sys
from pathlib import Path

from . import commands
from .logs import read_records
from .provenance import environment
from .results import Result, portable_command, portable_path
from .run_folder import RunFolder

SUBSETS = ("train", "valid")


class EvalLossesError(RuntimeError):
    pass


def validate_command(checkpoint: Path, data: str, cfg: dict) -> list:
    """fairseq-validate of ``checkpoint`` on SUBSETS with the task it was trained with (``cfg``: the
    checkpoint's configuration); a translation task's BLEU during validation is switched off (its loss is
    the same without it, and the training set would be translated)."""
    from phm_fairseq.cli.checkpoint_files import config_value

    task = cfg["task"]
    command = ["fairseq-validate", data, "--user-dir", commands.plugin_dir(), *commands.NO_PREFETCH_THREAD]
    command += ["--path", str(checkpoint), "--task", config_value(task, "_name"), "--valid-subset", ",".join(SUBSETS)]
    for key in ("source_lang", "target_lang"):
        if value := config_value(task, key):
            command += [f"--{key.replace('_', '-')}", value]
    if config_value(task, "eval_bleu") is not None:
        command += ["--model-overrides", "{'eval_bleu': False}"]
    return [*command, "--max-tokens", "4096", "--log-format", "json"]


def read_losses(output: str) -> dict:
    """{subset: {"loss": ..., "nll_loss": ..., "examples": ...}} from fairseq-validate's records
    ``... | INFO | train | {"train_loss": "2.579", "train_nll_loss": "0.706", ..., "train_bsz": "29000"}``."""
    losses = {}
    for record in read_records(output):
        stats = record.stats()
        if stats and "loss" in stats and record.name in SUBSETS:
            losses[record.name] = {
                "loss": stats["loss"],
                "nll_loss": stats.get("nll_loss"),
                "examples": int(stats["bsz"]),
            }
    return losses


def record_valid_loss(result: Result) -> float:
    """The record's validation loss at the epoch of the checkpoint_best.pt it scored."""
    epoch, valid = result.training.checkpoint_best_epoch, result.training.curve.get("valid", [])
    if epoch is None or not 1 <= epoch <= len(valid):
        raise EvalLossesError("its record has no validation loss at its best epoch")
    return valid[epoch - 1][1]


def measure(seed_folder: Path) -> dict:
    """The losses of the seed's checkpoint_best.pt, checked against its record, with the command and the environment."""
    import torch

    import phm_fairseq.checkpoints  # noqa: F401  (safe loading of the plugin's checkpoints)

    folder = RunFolder(seed_folder)
    result_file, checkpoint = folder.result, folder.best
    for needed in (result_file, checkpoint):
        if not needed.is_file():
            raise EvalLossesError(f"{seed_folder}: no {needed.name}; measure a run where it was trained")
    result = Result.read(result_file)
    cfg = torch.load(checkpoint, map_location="cpu", weights_only=True, mmap=True)["cfg"]
    data = result.training.data or result.config_values["data"]
    command = validate_command(checkpoint, data, cfg)
    made_by = environment(command=portable_command(command))  # the code as it starts, whatever changes while it runs
    finished = commands.run(command, folder.log("eval_losses"), quiet=True)
    losses = read_losses(finished.output)
    if sorted(losses) != sorted(SUBSETS):
        raise EvalLossesError(f"{seed_folder}: fairseq-validate reported {sorted(losses)}, not {list(SUBSETS)}")
    expected = record_valid_loss(result)
    if round(losses["valid"]["loss"], 3) != round(expected, 3):
        raise EvalLossesError(
            f"{checkpoint}: its validation loss is {losses['valid']['loss']}, the record's at its best epoch "
            f"({result.training.checkpoint_best_epoch}) is {expected}: it is not the checkpoint of {result_file}"
        )
    return {
        "checkpoint": portable_path(checkpoint),
        "best_epoch": result.training.checkpoint_best_epoch,
        "losses": losses,
        "load_average": finished.load_average,
        "environment": made_by,
    }


def write(seed_folder: Path) -> Path:
    """measure(seed_folder), written to its eval_losses.json."""
    measured = measure(seed_folder)
    out = RunFolder(seed_folder).eval_losses
    out.write_text(json.dumps(measured, indent=1) + "\n", encoding="utf-8")
    train, valid = (measured["losses"][subset]["loss"] for subset in SUBSETS)
    print(f"{seed_folder}: training {train}, validation {valid} (dropout off) -> {out}", flush=True)
    return out


def main(argv=None):
    parser = argparse.ArgumentParser(
        prog="python -m phm_experiments.eval_losses",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("runs", nargs="+", help="run folders below --runs-dir (e.g. converged/multi30k/phm_n4)")
    parser.add_argument("--runs-dir", type=Path, default=Path("results/runs"), help="default: %(default)s")
    args = parser.parse_args(argv)
    seeds = []  # every run's seed folders that have a record
    for name in args.runs:
        run = args.runs_dir / name
        records = sorted(run.glob("seed*/result.json"))
        if not records:
            parser.error(f"{run}: no seed*/result.json (is --runs-dir {args.runs_dir} where it was trained?)")
        seeds += [RunFolder(record.parent) for record in records]
    for seed in seeds:
        if seed.eval_losses.is_file():
            print(f"{seed.path}: measured already")
        elif not seed.best.is_file():
            print(f"{seed.path}: no checkpoint_best.pt, left")
        else:
            try:
                write(seed.path)
            except (EvalLossesError, commands.CommandFailed) as error:
                parser.exit(1, f"{parser.prog}: error: {error}\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
