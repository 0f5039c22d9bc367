"""The gap to the dense twin against the model's width: for each series (a kind of model, e.g. PHM n=4 with
one recipe), its runs at each hidden size set against the dense twin of that size, on the best checkpoint
and on the average of the last checkpoints (each seed's figures averaged, as phm-collect's rows).

    python -m phm_experiments.report.width --out results/width_trend \\
        --hidden 128 256 \\
        --dense converged/multi30k/transformer converged/multi30k_iwslt/transformer \\
        --series "PHM n=4" converged/multi30k/phm_n4_lr008 converged/multi30k_iwslt/phm_n4 \\
        --series "PHM n=2" converged/multi30k/phm_n2_lr008 converged/multi30k_iwslt/phm_n2

Each run is named by its folder below --runs-dir (results/runs), one per --hidden value, in that order; a
series without runs at some width leaves that point out. Writes OUT.md, OUT.json and OUT.png.
"""

import argparse
import functools
from pathlib import Path

from . import files
from .aggregate import ReportError, load_results, run_rows
from .plots import palette, pyplot
from .trace import FOOTNOTE, MARK


def figures(rows_of, runs_dir: Path, name: str) -> dict | None:
    """The config folder ``name``'s figures, its seeds averaged as in phm-collect's rows (``rows_of(folder)``:
    run_rows of the folder's runs): the best checkpoint's and the last-N average's score (and their standard
    deviations), its best validation score and its parameters; None where it has no finished run."""
    folder = runs_dir / name
    if not folder.is_dir() or not any(folder.glob("seed*/result.json")):
        return None
    rows = rows_of(folder.parent)
    best = rows[folder.name]
    values = {
        "run": name,
        "seeds": best.seeds,
        "best": best.score,
        "best_std": best.score_std,
        "best_valid": best.best_valid,
        "params_no_emb": best.params_no_emb,
        "metric": best.metric,
        "traced": best.traced,  # each seed's record: yes, no (its code cannot be traced) or unknown
    }
    average = next((row for key, row in rows.items() if key.startswith(f"{folder.name}@avg")), None)
    if average is not None and average.seeds == best.seeds:
        values.update(last=average.score, last_std=average.score_std)
    return values


def gaps(runs_dir: Path, hidden: list[int], dense: list[str], series: dict[str, list[str]]) -> dict:
    """{"hidden": [...], "dense": [figures per width], "series": {label: [figures with gap_best/gap_last]}}."""
    for label, names in {"--dense": dense, **series}.items():
        if len(names) != len(hidden):
            raise ReportError(f"{label}: {len(names)} runs for {len(hidden)} widths ({hidden}): give one per width")
    rows_of = functools.cache(lambda folder: {row.row: row for row in run_rows(load_results(folder))})
    twins = [figures(rows_of, runs_dir, name) for name in dense]
    for width, twin, name in zip(hidden, twins, dense):
        if twin is None:
            raise ReportError(f"hidden {width}: the dense twin {runs_dir / name} has no finished run (result.json)")
    table = {}
    for label, names in series.items():
        points = []
        for twin, name in zip(twins, names):
            point = figures(rows_of, runs_dir, name)
            if point is not None:
                point["gap_best"] = round(point["best"] - twin["best"], 2)
                if point.get("last") is not None and twin.get("last") is not None:
                    point["gap_last"] = round(point["last"] - twin["last"], 2)
            points.append(point)
        table[label] = points
    points = [p for p in (*twins, *(p for points in table.values() for p in points)) if p is not None]
    metrics = {p["metric"] for p in points}
    if len(metrics) > 1:  # a gap between a BLEU and an accuracy means nothing
        runs = "; ".join(f"{p['run']}: {p['metric']}" for p in points)
        raise ReportError(f"the runs are scored by {' and '.join(sorted(metrics))}, not one metric: {runs}")
    return {"hidden": hidden, "metric": metrics.pop(), "dense": twins, "series": table}


def metric_name(result: dict) -> str:
    """The score as the report names it: BLEU, accuracy."""
    return {"bleu": "BLEU"}.get(result["metric"], result["metric"])


def markdown(title: str, result: dict, command: str) -> str:
    def score(point, key):
        if point is None or point.get(key) is None:
            return ""
        std = point.get(f"{key}_std")
        return f"{point[key]:.2f}" + (f" ± {std:.2f}" if std is not None else "")

    def gap(point, key):
        return "" if point is None or point.get(key) is None else f"{point[key]:+.2f}"

    def traced(point):
        return point["traced"] + (f" {MARK}" if "no" in point["traced"].split(" / ") else "")

    name = metric_name(result)
    lines = [
        f"# {title}",
        "",
        f"{name[0].upper()}{name[1:]} on the test set (mean ± standard deviation over seeds), chosen on validation "
        f"{name}; the gap is the "
        "model's score minus its dense twin's at the same width, for the best checkpoint and for the average of "
        "the last checkpoints.",
        "",
        "| hidden | model | run | seeds | best valid | best | gap | last avg | gap | parameters without embeddings "
        "| traced |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for i, width in enumerate(result["hidden"]):
        rows = [("dense twin", result["dense"][i])] + [(label, points[i]) for label, points in result["series"].items()]
        for label, point in rows:
            if point is None:
                continue
            lines.append(
                f"| {width} | {label} | {point['run']} | {point['seeds']} | {point['best_valid'] or ''} | "
                f"{score(point, 'best')} | {gap(point, 'gap_best')} | {score(point, 'last')} | "
                f"{gap(point, 'gap_last')} | {point['params_no_emb']:,} | {traced(point)} |"
            )
    points = [p for points in (result["dense"], *result["series"].values()) for p in points if p is not None]
    if any("no" in point["traced"].split(" / ") for point in points):
        lines += ["", f"traced: each seed's record; {FOOTNOTE}"]
    lines += ["", "Made by:", "", "```", command, "```", ""]
    return "\n".join(lines)


def plot(result: dict, path: Path, title: str) -> None:
    plt = pyplot()
    fig, axes = plt.subplots(1, 2, figsize=(10, 4), sharey=True)
    for ax, key, name in ((axes[0], "gap_best", "best checkpoint"), (axes[1], "gap_last", "average of the last")):
        ax.axhline(0, color="black", linewidth=1, label="dense twin")
        for i, (label, points) in enumerate(result["series"].items()):
            score = "best" if key == "gap_best" else "last"  # the error bar: the model's spread over its seeds
            shown = [(w, p) for w, p in zip(result["hidden"], points) if p is not None and p.get(key) is not None]
            if shown:
                ax.errorbar(
                    [w for w, _ in shown],
                    [p[key] for _, p in shown],
                    yerr=[p.get(f"{score}_std") or 0 for _, p in shown],
                    marker="o",
                    capsize=3,
                    color=palette(i),
                    label=label,
                )
        ax.set_xscale("log", base=2)
        ax.set_xticks(result["hidden"], [str(w) for w in result["hidden"]])
        ax.set_xlabel("hidden size")
        ax.set_title(name)
        ax.grid(alpha=0.3)
    axes[0].set_ylabel(f"{metric_name(result)} minus the dense twin's")
    axes[1].legend(fontsize=8)
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs-dir", type=Path, default=Path("results/runs"))
    parser.add_argument("--hidden", type=int, nargs="+", required=True, help="the widths, in order")
    parser.add_argument("--dense", nargs="+", required=True, help="the dense twin's run folder at each width")
    parser.add_argument("--series", nargs="+", action="append", required=True, metavar=("LABEL", "RUN"))
    parser.add_argument("--title", default="The gap to the dense twin against the width")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args(argv)
    # checked before the work: the files are written before the plot, which needs widths above 0
    if any(width <= 0 for width in args.hidden) or len(set(args.hidden)) < len(args.hidden):
        parser.error(f"--hidden {' '.join(map(str, args.hidden))}: the widths are sizes above 0, each given once")
    labels = [label for label, *_ in args.series]
    if len(set(labels)) < len(labels):
        twice = sorted({label for label in labels if labels.count(label) > 1})
        parser.error(f"--series {', '.join(twice)}: a label given twice; give each series its own")
    files.check_out(parser, args.out)
    series = {label: names for label, *names in args.series}
    try:
        result = gaps(args.runs_dir, args.hidden, args.dense, series)
    except ReportError as error:
        parser.exit(2, f"phm_experiments.report.width: {error}\n")
    files.write("phm_experiments.report.width", argv, args.out, result, args.title, markdown, plot)


if __name__ == "__main__":
    main()
