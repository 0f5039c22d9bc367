"""run.py's command line (run.sh builds it): what cannot time a run, or names a run twice, is refused
here, before anything runs."""

import argparse
import math
import sys
import time
from pathlib import Path

from . import clock
from .modes import PARTS, with_needs
from .paths import GPU, REPO

DESCRIPTION = """The GPU run (scripts/gpu/run.sh calls it): one command that makes the most of a GPU lent for minutes.

Parts, in this order, each with its own time cap, none losing what another finished:
  install     the wheels of scripts/gpu/wheels.txt that the machine's Python cannot import, into WORK/site
              (pip --no-index --no-deps --target), then `import fairseq, phm_fairseq, phm_experiments` and the versions;
  data        Multi30k en-de from data/multi30k by data-prep/multi30k.sh (beside cuda_tests);
  cuda_tests  pytest -m cuda tests/test_gpu_cuda.py (PHMLinear, QuaternionLinear, HypercomplexLSTM, models);
  training    fairseq-train of the dense twin, PHM n=4 and the quaternion model in fp32, --fp16, --amp,
              --memory-efficient-fp16 and bfloat16 --amp (scripts/gpu/training.py), fairseq-generate --fp16;
  benchmarks  benchmarks.bench_linear and benchmarks.bench_translation on the device;
  quality     phm-run of configs/gpu (Multi30k at the paper's sizes, converged recipe) side by side, each
              capped in time by fairseq's --stop-time-hours, scored with sacrebleu on test2016
              (scripts/gpu/quality.py).
OUT receives report.json and report.md (rewritten after every step), one log per part, and
artifacts.tar (benchmark reports, the quality runs' records and logs, as paths of this repository).
"""


def part_cap(text: str) -> tuple:
    """--cap's PART=SECONDS."""
    part, _, seconds = text.partition("=")
    capped = [name for name in PARTS if name != "quality"]
    if part not in capped:
        raise argparse.ArgumentTypeError(f"'{text}': PART is one of {', '.join(capped)} (quality takes what is left)")
    try:
        seconds = float(seconds)
    except ValueError:
        raise argparse.ArgumentTypeError(f"'{text}': SECONDS is a number, e.g. {part}=240") from None
    if not math.isfinite(seconds) or seconds < clock.MIN_PART_SECONDS:
        raise argparse.ArgumentTypeError(
            f"'{text}': SECONDS is a number of at least {clock.MIN_PART_SECONDS} (no part starts with less), e.g. "
            f"{part}=240; to leave the part out, leave it out of --parts"
        )
    return part, seconds


def budget(text: str) -> float:
    """--budget's SECONDS."""
    try:
        seconds = float(text)
    except ValueError:
        seconds = math.nan
    if not math.isfinite(seconds) or seconds <= 0:
        raise argparse.ArgumentTypeError(f"'{text}': the run's time in seconds, a number above 0, e.g. 510")
    return seconds


def parse_args(argv=None):
    parser = argparse.ArgumentParser(
        prog="scripts/gpu/run.py", description=DESCRIPTION, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--mode", choices=["gpu", "cpu-dry-run"], default="gpu")
    parser.add_argument("--out", type=Path, required=True, help="the report, the logs and artifacts.tar")
    parser.add_argument("--work", type=Path, required=True, help="installed wheels, data, runs (scratch)")
    parser.add_argument("--wheels", type=Path, default=GPU / "wheels")
    parser.add_argument("--python", default=sys.executable, help="the interpreter that runs every part")
    parser.add_argument("--started", type=float, default=time.time(), help="UNIX time the command started")
    parser.add_argument(
        "--parts",
        nargs="+",
        choices=PARTS,
        default=list(PARTS),
        help="run only these parts and those they need (install; data for training and after)",
    )
    parser.add_argument("--command", default="scripts/gpu/run.sh", help="the command as typed, for the report")
    parser.add_argument("--budget", type=budget, help="seconds the whole run may take (default: 470 on the GPU)")
    parser.add_argument("--cap", type=part_cap, action="append", default=[], metavar="PART=SECONDS",
                        help="another time cap for a part, e.g. training=240 (quality takes what is left)")  # fmt: skip
    parser.add_argument("--quality", nargs="+", metavar="FOLDER/NAME", help="the configs/gpu runs of the quality "
                        "part, e.g. multi30k_base/phm_n4 (default: all eight)")  # fmt: skip
    args = parser.parse_args(argv)
    args.parts = list(with_needs(args.parts))
    unknown = [name for name in args.quality or [] if not (REPO / "configs" / "gpu" / f"{name}.yaml").is_file()]
    if unknown:
        parser.error(f"--quality: no configs/gpu/{unknown[0]}.yaml (give FOLDER/NAME of a file in configs/gpu)")
    twice = [name for i, name in enumerate(args.quality or []) if name in args.quality[:i]]
    if twice:
        parser.error(f"--quality: {twice[0]} is named twice (each run has one folder): name each run once")
    for variable, flag, folder in (("OUT", "--out", args.out), ("PHM_GPU_WORK", "--work", args.work)):
        if folder.exists() and not folder.is_dir():
            parser.error(
                f"{variable} ({flag}): {folder} is a file, not a folder: name a folder (it is made if missing)"
            )
    return args


def make_folders(args) -> None:
    """OUT and WORK, made where missing; a path that cannot be one ends the command with a message."""
    for variable, folder in (("OUT", args.out), ("PHM_GPU_WORK", args.work)):
        try:
            folder.mkdir(parents=True, exist_ok=True)
        except OSError as error:  # a file on its path, no permission
            sys.exit(f"run.py: {variable}: cannot make the folder {folder}: {error.strerror}: name another one")
