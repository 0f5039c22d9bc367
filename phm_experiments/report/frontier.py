"""Any model against "a dense model with as many parameters": the dense frontier (dense models of several
widths, one recipe) as a curve of score against parameters without embeddings, and each other model a
point on the same axes, on the test set's best checkpoint (and the average of the last checkpoints, in the
table) and on the best validation score.

    python -m phm_experiments.report.frontier --out results/frontier_multi30k \\
        --dense converged/multi30k/transformer_equal_params_lr008 converged/multi30k_frontier/transformer_h112 \\
            converged/multi30k/transformer \\
        --point "PHM n=4" converged/multi30k/phm_n4_lr008 --point "PHM n=2" converged/multi30k/phm_n2_lr008

Each run is named by its folder below --runs-dir (results/runs); its seeds are averaged as in phm-collect's
rows. A model's height above the dense curve at its own size is read off the curve, interpolated linearly
in log parameters between the two dense models around it (none outside the curve's range, but for 2% at
its ends). Every row
names the machines its seeds ran on: rows from different CPUs compare only as means over seeds
(docs/reproducibility.md). Writes OUT.md, OUT.json and OUT.png.
"""

import argparse
import functools
import math
import statistics
from pathlib import Path

from . import files
from .aggregate import ReportError, load_results, run_rows
from .plots import palette, pyplot
from .trace import FOOTNOTE, MARK
from .width import figures, metric_name

KEYS = {"best": "test, best checkpoint", "last": "test, last 5 averaged", "valid": "best validation"}
PLOTTED = ("best", "valid")  # the plot's two panels; the table has every key


def untraced(values: dict) -> bool:
    """Whether a seed of the row ran from code that cannot be traced (marked MARK)."""
    return "no" in values["traced"].split(" / ")


def machines(runs_dir: Path, name: str) -> str:
    """The kinds of CPU (model, torch's kernels) and pins that the folder's seeds ran on."""
    kinds = set()
    for entry in load_results(runs_dir / name):
        env = entry.result.environment
        pinned = ", pinned" if env.kernels else ""
        kinds.add(f"{env.device} ({env.cpu_capability or 'kernels not recorded'}{pinned})")
    return " / ".join(sorted(kinds))


def point(rows_of, runs_dir: Path, name: str) -> dict:
    values = figures(rows_of, runs_dir, name)
    if values is None:
        raise ReportError(f"{runs_dir / name}: no finished run (result.json)")
    valid = [float(v) for v in (values["best_valid"] or "").split(" / ") if v]
    values["valid"] = round(statistics.fmean(valid), 2) if valid else None
    values["valid_std"] = round(statistics.stdev(valid), 2) if len(valid) > 1 else None
    values["machines"] = machines(runs_dir, name)
    return values


def on_curve(curve: list[dict], params: int, key: str, within: float = 0.02, digits: int = 2):
    """The dense curve's ``key`` at ``params`` (linear in log parameters, to ``digits`` places); None outside
    its range, but for sizes within ``within`` of an end (a dense model sized to match a PHM model lands a few
    weights off)."""
    known = sorted((p["params_no_emb"], p[key]) for p in curve if p.get(key) is not None)
    if known and params < known[0][0]:
        params = known[0][0] if params >= known[0][0] * (1 - within) else params
    elif known and params > known[-1][0]:
        params = known[-1][0] if params <= known[-1][0] * (1 + within) else params
    for (x0, y0), (x1, y1) in zip(known, known[1:]):
        if x0 <= params <= x1:
            t = (math.log(params) - math.log(x0)) / (math.log(x1) - math.log(x0)) if x1 > x0 else 0.0
            return round(y0 + t * (y1 - y0), digits)
    return None


def frontier(runs_dir: Path, dense: list[str], points: dict[str, str]) -> dict:
    rows_of = functools.cache(lambda folder: {row.row: row for row in run_rows(load_results(folder))})
    curve = sorted((point(rows_of, runs_dir, name) for name in dense), key=lambda p: p["params_no_emb"])
    models = {label: point(rows_of, runs_dir, name) for label, name in points.items()}
    for values in models.values():
        for key in KEYS:
            height = on_curve(curve, values["params_no_emb"], key)
            values[f"above_{key}"] = None if height is None or values[key] is None else round(values[key] - height, 2)
    metrics = {p["metric"] for p in (*curve, *models.values())}
    if len(metrics) > 1:
        raise ReportError(f"the runs are scored by {' and '.join(sorted(metrics))}, not one metric")
    return {"metric": metrics.pop(), "dense": curve, "points": models}


def markdown(title: str, result: dict, command: str) -> str:
    def score(values, key):
        if values.get(key) is None:
            return ""
        std = values.get(f"{key}_std")
        return f"{values[key]:.2f}" + (f" ± {std:.2f}" if std is not None else "")

    def above(values, key):
        return "" if values.get(f"above_{key}") is None else f"{values[f'above_{key}']:+.2f}"

    def traced(values):
        return values["traced"] + (f" {MARK}" if untraced(values) else "")

    name = metric_name(result)
    lines = [
        f"# {title}",
        "",
        f"{name} on the test set of the best checkpoint and of the last checkpoints averaged, and the best "
        f"validation {name} (mean ± sd over seeds); \"above\": the model's score minus the dense curve's at "
        "its parameters without embeddings.",
        "",
        "| model | run | parameters without embeddings | seeds | test | above | test, last averaged | above "
        "| valid | above | machines | traced |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    rows = [("dense", p) for p in result["dense"]] + list(result["points"].items())
    for label, values in rows:
        lines.append(
            f"| {label} | {values['run']} | {values['params_no_emb']:,} | {values['seeds']} | {score(values, 'best')} "
            f"| {above(values, 'best')} | {score(values, 'last')} | {above(values, 'last')} "
            f"| {score(values, 'valid')} | {above(values, 'valid')} | {values['machines']} "
            f"| {traced(values)} |"
        )
    if any(untraced(values) for _, values in rows):
        lines += ["", f"traced: each seed's record; {FOOTNOTE}"]
    lines += ["", "Made by:", "", "```", command, "```", ""]
    return "\n".join(lines)


def plot(result: dict, path: Path, title: str) -> None:
    plt = pyplot()
    fig, axes = plt.subplots(1, 2, figsize=(11, 5.2))
    for ax, key in zip(axes, PLOTTED):
        label = KEYS[key]
        curve = [p for p in result["dense"] if p.get(key) is not None]
        ax.errorbar(
            [p["params_no_emb"] for p in curve],
            [p[key] for p in curve],
            yerr=[p.get(f"{key}_std") or 0 for p in curve],
            marker="s",
            capsize=3,
            color="black",
            label="dense",
        )
        for i, (name, values) in enumerate(result["points"].items()):
            if values.get(key) is not None:
                ax.errorbar(
                    [values["params_no_emb"]],
                    [values[key]],
                    yerr=[values.get(f"{key}_std") or 0],
                    marker="o",
                    capsize=3,
                    linestyle="none",
                    color=palette(i),
                    label=name + (f" {MARK}" if untraced(values) else ""),
                )
        ax.set_xscale("log")
        ax.set_xlabel("parameters without embeddings")
        ax.set_ylabel(f"{metric_name(result)} ({label})")
        ax.grid(alpha=0.3)
    handles, labels = axes[0].get_legend_handles_labels()  # one legend for both, below: no point hidden
    fig.legend(handles, labels, loc="lower center", ncol=4, fontsize=8, frameon=False)
    fig.suptitle(title, fontsize=10)
    fig.tight_layout(rect=(0, 0.06 + 0.035 * math.ceil(len(labels) / 4), 1, 1))
    fig.savefig(path, dpi=120)
    plt.close(fig)


def against_the_curve(module: str, description: str, title: str, compute, markdown, plot, argv=None) -> None:
    """The command line of a report that sets models against the dense curve (this one, fit.py): --dense
    runs, --point LABEL RUN, and ``compute(runs_dir, dense, points)``'s result written as OUT.md/.json/.png."""
    parser = argparse.ArgumentParser(description=description, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs-dir", type=Path, default=Path("results/runs"))
    parser.add_argument("--dense", nargs="+", required=True, help="the dense models' run folders (the curve)")
    parser.add_argument("--point", nargs=2, action="append", default=[], metavar=("LABEL", "RUN"))
    parser.add_argument("--title", default=title)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args(argv)
    labels = [label for label, _ in args.point]
    if len(set(labels)) < len(labels):
        parser.error("--point: a label given twice; give each model its own")
    files.check_out(parser, args.out)
    try:
        result = compute(args.runs_dir, args.dense, dict(args.point))
    except ReportError as error:
        parser.exit(2, f"{module}: {error}\n")
    files.write(module, argv, args.out, result, args.title, markdown, plot)


def main(argv=None):
    against_the_curve(
        "phm_experiments.report.frontier", __doc__, "Against the dense frontier", frontier, markdown, plot, argv
    )


if __name__ == "__main__":
    main()
