"""PHM-LSTM and quaternion LSTM against nn.LSTM: forward+backward and eval forward time.

    python -m benchmarks.bench_lstm                   # 300 -> 300, length 30, batch 256, this CPU
    python -m benchmarks.bench_lstm --device cuda

Writes benchmarks/results/lstm_<device>.{json,md,png}. Target: forward+backward <= 1.15x nn.LSTM.
Every HypercomplexLSTM builds its gate matrices once per forward and runs PyTorch's fused LSTM op.
"""

import argparse

import torch
from torch import nn
from torch.nn.utils.rnn import PackedSequence, pack_padded_sequence

from phm_layers import HypercomplexLSTM, LinearSpec

from .common import RESULTS, default_threads, environment, timed_ratio, write_report

TARGET = 1.15
VARIANTS = [  # (name, spec, gate layout, packed input)
    ("dense (one bias)", LinearSpec(), "per-gate", False),
    ("quaternion", LinearSpec("quaternion"), "per-gate", False),
    ("PHM n=2", LinearSpec("phm", n=2), "per-gate", False),
    ("PHM n=5", LinearSpec("phm", n=5), "per-gate", False),
    ("PHM n=10", LinearSpec("phm", n=10), "per-gate", False),
    ("PHM n=5 fused", LinearSpec("phm", n=5), "fused", False),
    ("PHM n=5 packed", LinearSpec("phm", n=5), "per-gate", True),
    ("quaternion packed", LinearSpec("quaternion"), "per-gate", True),
]


def make_input(args, packed: bool):
    x = torch.randn(args.length, args.batch, args.size, device=args.device, requires_grad=True)
    if not packed:
        return x
    # lengths spread over [length/2, length], as in a real batch
    lengths = torch.linspace(args.length, args.length // 2, args.batch).round().long()
    packed = pack_padded_sequence(x.detach(), lengths.cpu(), enforce_sorted=False)
    # the packed data itself is the leaf, so that every step has a graph of its own
    return PackedSequence(packed.data.requires_grad_(), *packed[1:])


def training_step(lstm, x):
    def step():
        lstm.zero_grad(set_to_none=True)
        out, _ = lstm(x)
        (out.data if hasattr(out, "batch_sizes") else out).sum().backward()

    return step


def eval_forward(lstm, x):
    def forward():
        with torch.inference_mode():
            lstm(x)

    return forward


def plot(rows, path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 3.6))
    xs = range(len(rows))
    ax.bar([i - 0.2 for i in xs], [r["train_ratio"] for r in rows], 0.4, label="forward+backward")
    ax.bar([i + 0.2 for i in xs], [r["eval_ratio"] for r in rows], 0.4, label="eval forward")
    ax.axhline(1.0, color="black", lw=0.8)
    ax.axhline(TARGET, color="C3", ls="--", lw=0.8, label=f"target {TARGET}x")
    ax.set_xticks(list(xs), [r["model"] for r in rows], rotation=25, ha="right", fontsize=8)
    ax.set_ylabel("time / nn.LSTM (lower is better)")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    parser.add_argument("--size", type=int, default=300, help="input and hidden size")
    parser.add_argument("--length", type=int, default=30)
    parser.add_argument("--batch", type=int, default=256)
    parser.add_argument("--rounds", type=int, default=10, help="alternating timing rounds")
    parser.add_argument("--threads", type=int, default=None, help="CPU threads (default: every core)")
    args = parser.parse_args()
    default_threads()
    if args.threads:
        torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    rows = []
    for name, spec, layout, packed in VARIANTS:
        x = make_input(args, packed)
        ref = nn.LSTM(args.size, args.size).to(args.device)
        ours = HypercomplexLSTM(args.size, args.size, spec, gate_layout=layout).to(args.device)
        train_s, ref_train_s, train_ratio, _ = timed_ratio(training_step(ours, x), training_step(ref, x), args.rounds)
        ours.eval(), ref.eval()
        eval_s, ref_eval_s, eval_ratio, _ = timed_ratio(eval_forward(ours, x), eval_forward(ref, x), args.rounds)
        row = {
            "model": name,
            "packed": packed,
            "params": sum(p.numel() for p in ours.parameters()),
            "lstm_params": sum(p.numel() for p in ref.parameters()),
            "train_ms": 1e3 * train_s,
            "lstm_train_ms": 1e3 * ref_train_s,
            "train_ratio": train_ratio,
            "eval_ms": 1e3 * eval_s,
            "lstm_eval_ms": 1e3 * ref_eval_s,
            "eval_ratio": eval_ratio,
            "meets_target": train_ratio <= TARGET,
        }
        rows.append(row)
        print(
            f"{name:<20} fwd+bwd {train_ratio:.3f}x ({1e3 * train_s:.0f} vs {1e3 * ref_train_s:.0f} ms)  "
            f"eval {eval_ratio:.3f}x",
            flush=True,
        )

    name = f"lstm_{args.device}"
    env = environment(args.device)
    columns = [
        ("model", "model"),
        ("packed", "packed input"),
        ("params", "params"),
        ("lstm_params", "nn.LSTM params"),
        ("lstm_train_ms", "nn.LSTM fwd+bwd ms"),
        ("train_ms", "fwd+bwd ms"),
        ("train_ratio", "fwd+bwd ratio"),
        ("lstm_eval_ms", "nn.LSTM eval ms"),
        ("eval_ms", "eval ms"),
        ("eval_ratio", "eval ratio"),
        ("meets_target", f"fwd+bwd <= {TARGET}x"),
    ]
    notes = (
        f"{args.size} -> {args.size}, length {args.length}, batch {args.batch}, float32, one layer, unidirectional; "
        f"packed rows: lengths spread from {args.length} to {args.length // 2}. Ratios are medians over "
        f"{args.rounds} rounds that alternate the model and nn.LSTM (torch.utils.benchmark's blocked_autorange, "
        ">= 0.2 s a side), so drift of the machine falls on both. "
        "nn.LSTM has two bias vectors, the PHM-LSTM's y = PHM(x) + PHM(h) + b one. "
        "The CPU is shared with other jobs: absolute times vary, the interleaved ratios much less."
    )
    report = write_report(name, f"PHM-LSTM vs nn.LSTM ({args.device})", env, columns, rows, notes)
    plot(rows, RESULTS / f"{name}.png")
    print(f"wrote {report} (+ .json, .png)")


if __name__ == "__main__":
    main()
