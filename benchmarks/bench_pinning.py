"""What pinning the CPU kernels (phm_experiments/kernels.py) costs a training step: words/s of the same
model on the same batches with the kernels pinned and with each CPU's own, one thread.

    python -m benchmarks.bench_pinning            # demo and iwslt sizes, PHM n=4 and the dense twin

Writes benchmarks/results/pinning_cpu.{json,md}. The pins are read when torch loads, so every
measurement is a process of its own: pinned and native alternate, ``--rounds`` times each, and the
median words/s of each side makes the ratio. A step: forward, backward and fairseq's Adam on the
bundled Multi30k en-de (4,096 tokens a batch), timed over ``--steps`` steps after 2 warm-up steps.
On a CPU without AVX-512 the pins change MKL's branch alone (ATen's kernels are AVX2 there anyway).
"""

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

from phm_experiments.kernels import PINNED, THREAD_VARIABLES

from .common import REPO, RESULTS, environment, prepare_multi30k, write_report

MODELS = {"dense twin": ["--arch", "transformer_twin_{size}"], "PHM n=4": ["--arch", "phm_transformer_{size}"]}
# each side's kernel variables (one thread each): the CPU's own choice; phm-run's pins; the pins with
# MKL's branch that Intel documents as the same on Intel and non-Intel CPUs
SIDES = {
    "native": {},
    "pinned": dict(PINNED),
    "pinned, MKL_CBWR=COMPATIBLE": {**PINNED, "MKL_CBWR": "COMPATIBLE"},
}


KEYS = [("pinned", "pinned"), ("compatible", "pinned, MKL_CBWR=COMPATIBLE")]


def measure(args) -> None:
    """In a fresh process: words/s of ``args.steps`` training steps of one model (printed last)."""
    import torch
    from fairseq.optim.adam import Adam

    from .bench_translation import batches, build_from_flags, training_step

    model, criterion, task, cfg = build_from_flags(MODELS[args.model], args, "cpu")
    samples = batches(task, "train", args.steps + 2, "cpu", max_tokens=cfg.max_tokens)
    step = training_step(model, criterion, Adam(model.parameters(), lr=1e-4), samples)
    for _ in range(2):
        step()
    words = sum(int(sample["ntokens"]) for sample in samples[2:])
    start = time.perf_counter()
    for _ in range(args.steps):
        step()
    print(f"{words / (time.perf_counter() - start):.3f} {torch.backends.cpu.get_cpu_capability()}")


def words_per_second(args, size, model, side) -> tuple:
    environ = {k: v for k, v in os.environ.items() if k not in (*PINNED, *THREAD_VARIABLES)}
    environ.update(SIDES[side], **dict.fromkeys(THREAD_VARIABLES, "1"))
    command = [sys.executable, "-m", "benchmarks.bench_pinning", "--measure", "--size", size, "--model", model]
    command += ["--steps", str(args.steps), "--data", args.data]
    out = subprocess.run(command, capture_output=True, text=True, cwd=REPO, env=environ)
    if out.returncode:
        raise RuntimeError(f"{' '.join(command)} failed:\n{out.stderr[-3000:]}")
    speed, capability = out.stdout.strip().splitlines()[-1].split()
    return float(speed), capability


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", default=str(REPO / "data-bin" / "multi30k.en-de"))
    parser.add_argument("--sizes", nargs="+", default=["demo", "iwslt"], choices=["demo", "iwslt", "base"])
    parser.add_argument("--models", nargs="+", default=list(MODELS), choices=list(MODELS))
    parser.add_argument("--steps", type=int, default=20, help="timed training steps a process")
    parser.add_argument("--rounds", type=int, default=3, help="processes per side, the sides alternating")
    parser.add_argument("--out", default=str(RESULTS), help="folder of the report")
    parser.add_argument("--measure", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--size", help=argparse.SUPPRESS)
    parser.add_argument("--model", help=argparse.SUPPRESS)
    parser.add_argument("--max-tokens", type=int, default=4096)
    args = parser.parse_args()
    if args.measure:
        return measure(args)
    prepare_multi30k(args.data)
    rows = []
    for size in args.sizes:
        for model in args.models:
            speeds, capabilities = {side: [] for side in SIDES}, {}
            for _ in range(args.rounds):
                for side in SIDES:
                    speed, capabilities[side] = words_per_second(args, size, model, side)
                    speeds[side].append(speed)
                    print(f"{size} {model} {side}: {speed:.0f} words/s", flush=True)
            native = statistics.median(speeds["native"])
            rows.append(
                {
                    "size": size,
                    "model": model,
                    "native_kernels": capabilities["native"],
                    "native_words_per_second": round(native, 1),
                    **{f"{key}_over_native": round(statistics.median(speeds[side]) / native, 3) for key, side in KEYS},
                    "words_per_second": {side: [round(s, 1) for s in values] for side, values in speeds.items()},
                }
            )
    env = environment()
    env["threads"] = 1  # each measuring process's (this process only starts them)
    pins = " ".join(f"{k}={v}" for k, v in PINNED.items())
    notes = (
        f"Pinned: {pins} (phm-run's default); compatible: the same with MKL_CBWR=COMPATIBLE; native: each "
        f"library's own choice for this CPU. One thread each. {args.steps} timed training steps a process after "
        f"2 warm-up steps, {args.rounds} processes a side, the sides alternating; medians. A ratio below 1 is "
        "what the pins cost."
    )
    columns = [
        ("size", "size"),
        ("model", "model"),
        ("native_kernels", "native ATen kernels"),
        ("native_words_per_second", "native words/s"),
        ("pinned_over_native", "pinned / native"),
        ("compatible_over_native", "compatible / native"),
    ]
    title = "What pinned kernels cost a training step (words/s, one thread)"
    print(write_report("pinning_cpu", title, env, columns, rows, notes=notes, directory=Path(args.out)))


if __name__ == "__main__":
    main()
