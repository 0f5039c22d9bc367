"""PHMLinear against nn.Linear: training step time, eval forward time and peak memory.

    python -m benchmarks.bench_linear                       # fp32 on this CPU
    python -m benchmarks.bench_linear --device cuda --dtype float16 bfloat16 --tokens 4096 16384 65536

Writes benchmarks/results/linear_<device>_<dtype>.{json,md,png} (--out: another folder), the report
rewritten after every row. Targets: forward+backward <= 1.10x dense, eval forward <= 1.03x dense (H
cached in eval mode).
"""

import argparse
from pathlib import Path

import torch
from torch import nn

from phm_layers import PHMLinear

from .common import (
    RESULTS,
    default_threads,
    environment,
    fresh_process,
    peak_rss_during,
    timed_ratio,
    write_report,
)

SHAPES = [(512, 2048), (2048, 512)]
NS = [2, 4, 8, 16]
TRAIN_TARGET, EVAL_TARGET = 1.10, 1.03


def make_layer(n: int, d: int, k: int, device: str, dtype: torch.dtype) -> nn.Module:
    layer = nn.Linear(d, k) if n == 0 else PHMLinear(d, k, n)
    return layer.to(device=device, dtype=dtype)


def training_step(layer, x):
    def step():
        layer.zero_grad(set_to_none=True)
        x.grad = None
        layer(x).sum().backward()

    return step


def eval_forward(layer, x):
    def forward():
        with torch.inference_mode():
            layer(x)

    return forward


def peak_memory_bytes(n, d, k, tokens, device, dtype) -> int:
    """Peak memory of one training step above what the layer and its input hold."""
    if device == "cuda":
        layer = make_layer(n, d, k, device, dtype)
        x = torch.randn(tokens, d, device=device, dtype=dtype, requires_grad=True)
        training_step(layer, x)()  # allocator warm-up
        layer.zero_grad(set_to_none=True)
        x.grad = None
        torch.cuda.synchronize()
        base = torch.cuda.memory_allocated()
        torch.cuda.reset_peak_memory_stats()
        training_step(layer, x)()
        torch.cuda.synchronize()
        return torch.cuda.max_memory_allocated() - base
    # On the CPU: a fresh process for each layer
    return int(fresh_process(__spec__.name, "--_peak-rss", n, d, k, tokens, str(dtype).split(".")[1]))


def _peak_rss_child(n, d, k, tokens, dtype):
    torch.manual_seed(0)
    layer = make_layer(n, d, k, "cpu", getattr(torch, dtype))
    x = torch.randn(tokens, d, dtype=getattr(torch, dtype), requires_grad=True)
    print(peak_rss_during(training_step(layer, x)))


def plot(rows, path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(SHAPES), figsize=(5 * len(SHAPES), 3.6), sharey=True)
    several = len({r["tokens"] for r in rows}) > 1
    for ax, (d, k) in zip(axes, SHAPES):
        sel = [r for r in rows if (r["in"], r["out"]) == (d, k)]
        xs = range(len(sel))
        w = 0.27
        ax.bar([i - w for i in xs], [r["train_ratio"] for r in sel], w, label="forward+backward")
        ax.bar(list(xs), [r["eval_ratio"] for r in sel], w, label="eval forward")
        memory = [r["memory_ratio"] if r["memory_ratio"] is not None else 0 for r in sel]
        ax.bar([i + w for i in xs], memory, w, label="peak memory")
        ax.axhline(1.0, color="black", lw=0.8)
        ax.axhline(TRAIN_TARGET, color="C0", ls="--", lw=0.8)
        labels = [f"n={r['n']}" + (f"\n{r['tokens'] // 1024}k" if several else "") for r in sel]
        ax.set_xticks(list(xs), labels, fontsize=8 if several else None)
        ax.set_title(f"PHMLinear {d}->{k} / nn.Linear")
    axes[0].set_ylabel("ratio to dense (lower is better)")
    axes[0].legend(loc="lower left", fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    parser.add_argument(
        "--dtype",
        nargs="+",
        default=None,
        help="float32 (CPU default), bfloat16 (CUDA default), float16: a report each",
    )
    parser.add_argument("--tokens", type=int, nargs="+", default=[4096], help="rows of the input, one row each")
    parser.add_argument("--ns", type=int, nargs="+", default=NS, help="the n of the PHM layers (default: %(default)s)")
    parser.add_argument("--rounds", type=int, default=15, help="alternating timing rounds")
    parser.add_argument("--min-run-time", type=float, default=0.2, help="seconds of calls per side and round")
    parser.add_argument("--no-memory", action="store_true", help="leave out peak memory (on CPU: a process each)")
    parser.add_argument("--out", type=Path, default=RESULTS, help="the reports' folder (default: %(default)s)")
    parser.add_argument("--_peak-rss", nargs=5, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args._peak_rss:
        n, d, k, tokens, dtype = args._peak_rss
        return _peak_rss_child(int(n), int(d), int(k), int(tokens), dtype)

    default_threads()
    for dtype_name in args.dtype or ["bfloat16" if args.device == "cuda" else "float32"]:
        benchmark(args, dtype_name)


def benchmark(args, dtype_name: str) -> None:
    """One report: every shape, token count and n in ``dtype_name``, rewritten after each row."""
    dtype = getattr(torch, dtype_name)
    torch.manual_seed(0)
    name = f"linear_{args.device}_{dtype_name}"
    env = environment(args.device)
    rows = []
    for tokens in args.tokens:
        for d, k in SHAPES:
            x = torch.randn(tokens, d, device=args.device, dtype=dtype, requires_grad=True)
            dense = make_layer(0, d, k, args.device, dtype)
            dense_memory = None if args.no_memory else peak_memory_bytes(0, d, k, tokens, args.device, dtype)
            for n in args.ns:
                phm = make_layer(n, d, k, args.device, dtype)
                timing = dict(rounds=args.rounds, min_run_time=args.min_run_time)
                train_s, dense_train_s, train_ratio, _ = timed_ratio(
                    training_step(phm, x), training_step(dense, x), **timing
                )
                phm.eval().merge(), dense.eval()  # inference computes with one H, merged
                eval_s, dense_eval_s, eval_ratio, _ = timed_ratio(
                    eval_forward(phm, x), eval_forward(dense, x), **timing
                )
                phm.train(), dense.train()
                memory = None if args.no_memory else peak_memory_bytes(n, d, k, tokens, args.device, dtype)
                row = {
                    "in": d,
                    "out": k,
                    "n": n,
                    "tokens": tokens,
                    "params": sum(p.numel() for p in phm.parameters()),
                    "dense_params": sum(p.numel() for p in dense.parameters()),
                    "train_ms": 1e3 * train_s,
                    "dense_train_ms": 1e3 * dense_train_s,
                    "train_ratio": train_ratio,
                    "eval_ms": 1e3 * eval_s,
                    "dense_eval_ms": 1e3 * dense_eval_s,
                    "eval_ratio": eval_ratio,
                    "peak_mib": None if memory is None else memory / 2**20,
                    "dense_peak_mib": None if dense_memory is None else dense_memory / 2**20,
                    "memory_ratio": None if memory is None else memory / dense_memory,
                }
                row["meets_targets"] = train_ratio <= TRAIN_TARGET and eval_ratio <= EVAL_TARGET
                rows.append(row)
                memory_text = "" if memory is None else f"  memory {row['memory_ratio']:.3f}x"
                print(
                    f"{dtype_name} {tokens:>6} tokens {d:>5}->{k:<5} n={n:<3} fwd+bwd {train_ratio:.3f}x  "
                    f"eval {eval_ratio:.3f}x{memory_text}",
                    flush=True,
                )
                report = write_report(name, f"PHMLinear vs nn.Linear ({args.device}, {dtype_name})", env, COLUMNS,
                                      rows, notes(args, dtype_name), directory=args.out)  # fmt: skip
    plot(rows, args.out / f"{name}.png")
    print(f"wrote {report} (+ .json, .png)")


COLUMNS = [
    ("in", "in"),
    ("out", "out"),
    ("n", "n"),
    ("tokens", "tokens"),
    ("params", "params"),
    ("dense_train_ms", "dense fwd+bwd ms"),
    ("train_ms", "PHM fwd+bwd ms"),
    ("train_ratio", "fwd+bwd ratio"),
    ("dense_eval_ms", "dense eval ms"),
    ("eval_ms", "PHM eval ms"),
    ("eval_ratio", "eval ratio"),
    ("memory_ratio", "peak memory ratio"),
    ("meets_targets", "meets targets"),
]


def notes(args, dtype_name: str) -> str:
    memory = (
        "not measured (--no-memory)."
        if args.no_memory
        else "torch.cuda.max_memory_allocated above the layer and input."
        if args.device == "cuda"
        else "resident-set high-water mark (VmHWM) of one training step in a fresh process, above the layer and input."
    )
    return (
        f"{dtype_name}; ratios are medians over {args.rounds} rounds that alternate PHM and dense "
        f"(torch.utils.benchmark's blocked_autorange, >= {args.min_run_time} s a side"
        + (", CUDA synchronised around each block" if args.device == "cuda" else "")
        + f"). Targets: forward+backward <= {TRAIN_TARGET}x, eval forward <= {EVAL_TARGET}x (H cached). "
        f"Peak memory: {memory}"
    )


if __name__ == "__main__":
    main()
