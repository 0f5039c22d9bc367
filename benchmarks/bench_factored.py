"""Eval forward of PHMLinear against nn.Linear from 1 to 4096 input rows: where the factored product
(A and S only, no H) beats the product with the cached H, and what the layer's own choice gives.

    python -m benchmarks.bench_factored              # fp32 on this CPU, every core
    python -m benchmarks.bench_factored --quick      # fewer rounds and sizes (a minute)

Writes benchmarks/results/factored_<device>.{json,md,png}:
- the sweep: for each shape and n, the factored product's time over the cached-H product's at
  every row count in ROW_SWEEP (the two timed against each other), and the largest row count up
  to which it is faster from 2 rows (the crossover that phm_layers.phm_linear.
  factored_crossover encodes; one row always takes H);
- the grid: PHMLinear (its own choice of product) against nn.Linear at ROWS x SHAPES x NS.
Targets: at <= 5 rows, for layers of >= 1024 input features, at least 0.5 n times faster than
nn.Linear; nowhere slower than 0.97x. Every ratio is a median over rounds that alternate the
two sides in this one process, at the same thread count.
"""

import argparse

import torch
from torch import nn

from benchmarks.common import RESULTS, default_threads, environment, timed_ratio, write_report
from phm_layers import PHMLinear
from phm_layers.product_rule import factored_crossover, factored_rows_rule

SHAPES = [(512, 2048), (2048, 512), (1024, 4096)]
# the sweep also covers the maps of the translation models' sizes (demo 128, iwslt 256, base 512:
# attention d -> d, fused Q/K/V d -> 3d, FFN d -> 4d -> d)
SWEEP_SHAPES = [
    (128, 128),
    (128, 512),
    (512, 128),
    (256, 256),
    (256, 768),
    (256, 1024),
    (1024, 256),
    (512, 512),
    (512, 1536),
    (512, 2048),
    (2048, 512),
    (1024, 4096),
]
NS = [2, 4, 8, 16]
ROWS = [1, 5, 40, 320, 4096]
ROW_SWEEP = [1, 2, 4, 8, 12, 16, 24, 32, 48, 64, 96, 128, 192, 256]
SPEEDUP_FEATURES, FLOOR, SAFE_MARGIN = 1024, 0.97, 1.03


def timed(fn, baseline, rounds: int):
    """(fn s, baseline s, median ratio): blocks of calls of at least 20 ms a side and round."""
    return timed_ratio(fn, baseline, rounds, min_run_time=0.02)[:3]


def inference(layer, x):
    """A call of ``layer(x)`` in inference mode, as eval-mode decoding runs it."""

    def run():
        with torch.inference_mode():
            layer(x)

    return run


def sweep(shapes, ns, rows_list, rounds):
    """For every shape, n and row count: the factored product's eval forward time over the product
    with the merged H (the choice factored_crossover makes; timed against each other), and the
    merged-H product's over nn.Linear's."""
    results = []
    for d, k in shapes:
        dense = nn.Linear(d, k).eval()
        for n in ns:
            factored, cached = PHMLinear(d, k, n).eval(), PHMLinear(d, k, n).eval().merge()  # as decoding merges
            factored.factored_max_rows, cached.factored_max_rows = 10**9, 0
            over_cached, cached_over_dense = {}, {}
            for rows in rows_list:
                x = torch.randn(rows, d)
                over_cached[rows] = timed(inference(factored, x), inference(cached, x), rounds)[2]
                cached_over_dense[rows] = timed(inference(cached, x), inference(dense, x), rounds)[2]
            code, rule = factored_crossover(d, k, n), factored_rows_rule(d, k, n)
            # the rule is safe where, at every row count it gives to the factored product, that
            # product is at most 3% slower than the product with H
            chosen = [r for r in rows_list if r in rule]
            safe = all(over_cached[r] <= SAFE_MARGIN for r in chosen)
            faster = [r for r in rows_list if r >= 2 and over_cached[r] < 1]
            crossover = max((r for r in faster if all(s in faster for s in rows_list if 2 <= s <= r)), default=0)
            results.append(
                {
                    "in": d,
                    "out": k,
                    "n": n,
                    "ratios": {  # each product's time over nn.Linear's
                        "factored": {r: over_cached[r] * cached_over_dense[r] for r in rows_list},
                        "cached H": cached_over_dense,
                    },
                    "factored_over_cached": over_cached,
                    "measured_crossover": crossover,
                    "code_crossover": code,
                    "rule_rows": [rule.start, rule.stop - 1] if rule else None,
                    "rule_safe": safe,
                }
            )
            print(
                f"sweep {d}->{k} n={n:2d}: factored faster from 2 up to {crossover} rows (rule: "
                f"{rule.start} to {code}, {'safe' if safe else 'NOT SAFE'})",
                flush=True,
            )
            for name, ratios in (("factored / cached H", over_cached), ("cached H / nn.Linear", cached_over_dense)):
                print(f"   {name:>20}: " + " ".join(f"{r}:{v:.2f}" for r, v in ratios.items()), flush=True)
    return results


def grid(shapes, ns, rows_list, rounds):
    """PHMLinear, choosing its product, against nn.Linear."""
    rows_out = []
    for d, k in shapes:
        dense = nn.Linear(d, k).eval()
        for n in ns:
            layer = PHMLinear(d, k, n).eval().merge()  # as fairseq-generate prepares it
            for rows in rows_list:
                x = torch.randn(rows, d)
                phm_s, dense_s, ratio = timed(inference(layer, x), inference(dense, x), rounds)
                speedup = 1 / ratio
                target = 0.5 * n if rows <= 5 and d >= SPEEDUP_FEATURES else FLOOR
                row = {
                    "in": d,
                    "out": k,
                    "n": n,
                    "rows": rows,
                    "product": "factored" if rows in layer.factored_rows() else "cached H",
                    "dense_us": 1e6 * dense_s,
                    "phm_us": 1e6 * phm_s,
                    "speedup": speedup,
                    "target": target,
                    "meets_target": speedup >= target,
                }
                rows_out.append(row)
                print(
                    f"grid {d}->{k} n={n:2d} rows={rows:5d} {row['product']:>9}: {speedup:.2f}x "
                    f"(target {target:g}x{'' if row['meets_target'] else ' MISSED'})",
                    flush=True,
                )
    return rows_out


def plot(sweeps, path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    shapes = sorted({(s["in"], s["out"]) for s in sweeps}, key=lambda s: s[0] * s[1])
    fig, axes = plt.subplots(1, len(shapes), figsize=(5 * len(shapes), 3.8), squeeze=False, sharey=True)
    for ax, (d, k) in zip(axes[0], shapes):
        for s in (s for s in sweeps if (s["in"], s["out"]) == (d, k)):
            rows = sorted(s["factored_over_cached"])
            ax.plot(rows, [1 / s["factored_over_cached"][r] for r in rows], "o-", ms=3, label=f"n={s['n']}")
        ax.axhline(1.0, color="black", lw=0.8)
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_title(f"{d} -> {k}")
        ax.set_xlabel("input rows")
        ax.grid(alpha=0.3)
    axes[0][0].set_ylabel("factored product: speed-up over cached H")
    axes[0][-1].legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=9, help="alternating timing rounds per ratio")
    parser.add_argument("--quick", action="store_true", help="3 rounds, the sweep's row counts thinned")
    parser.add_argument("--skip-sweep", action="store_true", help="only the grid against nn.Linear")
    parser.add_argument("--sweep-only", action="store_true", help="only the sweep (printed, no report)")
    args = parser.parse_args()
    default_threads()
    torch.manual_seed(0)
    rounds = 3 if args.quick else args.rounds
    sweep_rows = ROW_SWEEP[::3] if args.quick else ROW_SWEEP
    sweeps = [] if args.skip_sweep else sweep(SWEEP_SHAPES, NS, sweep_rows, rounds)
    if args.sweep_only:
        return
    rows = grid(SHAPES, NS, ROWS, rounds)

    env = environment("cpu")
    columns = [
        ("in", "in"),
        ("out", "out"),
        ("n", "n"),
        ("rows", "rows"),
        ("product", "PHMLinear's product"),
        ("dense_us", "nn.Linear us"),
        ("phm_us", "PHMLinear us"),
        ("speedup", "speed-up"),
        ("target", "target"),
        ("meets_target", "meets target"),
    ]
    met = sum(r["meets_target"] for r in rows)
    sweep_lines = [
        "Crossover (largest row count up to which the factored product beats the cached-H product at "
        "every count measured from 2 rows; ratio = factored time / cached-H time, the two timed against "
        "each other). The layer's default rule (factored_rows_rule) gives the factored product 2 to "
        "factored_crossover() rows (one row by H is a matrix-vector product); "
        "it is safe for a shape where the factored product, at every row count the rule gives it, is at "
        f"most {SAFE_MARGIN:.2f}x the cached-H product's time. "
        f"{sum(s['rule_safe'] for s in sweeps)} of {len(sweeps)} shapes safe:",
        "",
        "| in | out | n | measured crossover | the rule's rows | rule safe | "
        + " | ".join(map(str, sweep_rows))
        + " |",
        "|" + "---|" * (6 + len(sweep_rows)),
    ]
    sweep_lines += [
        f"| {s['in']} | {s['out']} | {s['n']} | {s['measured_crossover']} | "
        + ("{} to {}".format(*s["rule_rows"]) if s["rule_rows"] else "none")
        + f" | {s['rule_safe']} | "
        + " | ".join(f"{s['factored_over_cached'][r]:.2f}" for r in sweep_rows)
        + " |"
        for s in sweeps
    ]
    notes = "\n".join(
        [
            f"Eval forward (torch.inference_mode, fp32), {env['threads']} threads; medians of {rounds} rounds "
            "alternating PHMLinear and nn.Linear (each side of a round: torch.utils.benchmark's "
            "blocked_autorange, >= 20 ms of calls). PHMLinear takes the factored product "
            "(kronecker_sum_linear: reads A and S only) at the row counts of factored_rows_rule(), else the "
            f"product with its cached H. Targets: >= 0.5 n x at <= 5 rows for >= {SPEEDUP_FEATURES} input "
            f"features; >= {FLOOR}x elsewhere. {met} of {len(rows)} rows meet their target.",
            "",
            *sweep_lines,
        ]
    )
    if not args.quick:
        path = write_report(
            "factored_cpu",
            "PHMLinear eval forward: factored product and cached H against nn.Linear",
            env,
            columns,
            rows,
            notes,
            extra={"sweep": sweeps},
        )
        if sweeps:
            plot(sweeps, RESULTS / "factored_cpu.png")
        print(f"wrote {path} (+ .json, .png)")


if __name__ == "__main__":
    main()
