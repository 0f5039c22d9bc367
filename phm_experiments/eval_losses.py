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
import re
import sys
from pathlib import Path

from . import commands
from .provenance import environment
from .results import Result, portable_command, portable_path
from .run_folder import BEST, CHECKPOINTS, EVAL_LOSSES, RESULT

FILE = EVAL_LOSSES
SUBSETS = ("train", "valid")


class EvalLossesError(RuntimeError):
    pass


def validate_command(checkpoint: Path, data: str, task) -> list:
    """fairseq-validate of ``checkpoint`` on SUBSETS with the task it was trained with (``task``: the
    checkpoint's cfg.task); a translation task's BLEU during validation is switched off (its loss is the
    same without it, and the training set would be translated)."""
    command = ["fairseq-validate", data, "--user-dir", commands.plugin_dir(), *commands.NO_PREFETCH_THREAD]
    command += ["--path", str(checkpoint), "--task", task["_name"], "--valid-subset", ",".join(SUBSETS)]
    for key in ("source_lang", "target_lang"):
        if task.get(key):
            command += [f"--{key.replace('_', '-')}", task[key]]
    if "eval_bleu" in task:
        command += ["--model-overrides", "{'eval_bleu': False}"]
    return [*command, "--max-tokens", "4096", "--log-format", "json"]


def read_losses(output: str) -> dict:
    """{subset: {"loss": ..., "nll_loss": ..., "examples": ...}} from fairseq-validate's records
    ``... | INFO | train | {"train_loss": "2.579", "train_nll_loss": "0.706", ..., "train_bsz": "29000"}``."""
    losses = {}
    for subset, text in re.findall(r"\| INFO \| (\w+) \| (\{.*\})$", output, re.M):
        stats = json.loads(text)
        if f"{subset}_loss" in stats:
            losses[subset] = {
                "loss": float(stats[f"{subset}_loss"]),
                "nll_loss": float(stats[f"{subset}_nll_loss"]) if f"{subset}_nll_loss" in stats else None,
                "examples": int(float(stats[f"{subset}_bsz"])),
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

    result_file, checkpoint = seed_folder / RESULT, seed_folder / CHECKPOINTS / BEST
    for needed in (result_file, checkpoint):
        if not needed.is_file():
            raise EvalLossesError(f"{seed_folder}: no {needed.name}; measure a run where it was trained")
    result = Result.read(result_file)
    task = torch.load(checkpoint, map_location="cpu", weights_only=False)["cfg"]["task"]
    data = result.training.data or result.config_values["data"]
    command = validate_command(checkpoint, data, task)
    made_by = environment(command=portable_command(command))  # the code as it starts, whatever changes while it runs
    finished = commands.run(command, seed_folder / "eval_losses.log", quiet=True)
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
    out = seed_folder / FILE
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
    folders = [args.runs_dir / name for name in args.runs]
    for folder in folders:
        if not sorted(folder.glob("seed*/result.json")):
            parser.error(f"{folder}: no seed*/result.json (is --runs-dir {args.runs_dir} where it was trained?)")
    for folder in folders:
        for seed_folder in sorted(p.parent for p in folder.glob("seed*/result.json")):
            out = seed_folder / FILE
            if out.is_file() or not (seed_folder / CHECKPOINTS / BEST).is_file():
                print(f"{seed_folder}: " + ("measured already" if out.is_file() else "no checkpoint_best.pt, left"))
                continue
            try:
                write(seed_folder)
            except (EvalLossesError, commands.CommandFailed) as error:
                parser.exit(1, f"{parser.prog}: error: {error}\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
