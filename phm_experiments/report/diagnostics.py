"""The training diagnostics of a report: how much each run's validation BLEU moved between epochs, and the
parameter statistics by kind that --log-parameter-stats logged (the epoch averages in result.json's
training curve: gnorm_<kind>, pnorm_<kind>, update_<kind>).

    python -m phm_experiments.report.diagnostics RUNS --rows transformer phm_n4 --seeds 1 --out docs/parameter_stats.png

plots the statistics of the named rows' runs (checkpoint_best.pt's rows) of the named seeds alone;
phm-collect adds the section and OUT.parameters.png to every report whose runs logged them.
"""

import argparse
import statistics
from pathlib import Path

from .aggregate import Entry, ReportError, load_results, row_order
from .trace import FOOTNOTE, MARK, UNTRACED

KINDS = ("rule", "factor", "dense", "bias", "norm", "embedding", "gate")
SHOWN = ("rule", "factor", "dense", "embedding")  # the kinds plotted: the maps, and the embeddings beside them


PLATEAU = 0.9  # the moves counted: from the first epoch at this fraction of the run's best validation BLEU
# update_<kind> is ||after - before|| / max(||before||, ||after||), which cannot exceed 2. Records logged
# before it was bounded divided by ||before|| alone: a kind that starts at zero (PHYDI's gates) has an
# epoch above it, a quotient by zero, which the means leave out.
UPDATE_BOUND = 2.0


def validation_moves(entry: Entry):
    """(mean, largest) absolute change of the validation BLEU from one epoch to the next on the run's plateau,
    where the best checkpoint is picked (the climb of the first epochs would swamp it); None without it."""
    scores = [bleu for _, bleu in entry.result.training.curve.get("valid_bleu", [])]
    if scores:
        scores = scores[next(i for i, bleu in enumerate(scores) if bleu >= PLATEAU * max(scores)) :]
    moves = [abs(b - a) for a, b in zip(scores, scores[1:])]
    return (statistics.mean(moves), max(moves)) if moves else None


def mean_statistic(entry: Entry, key: str, bound: float = float("inf")):
    """The mean over the run's epochs of one statistic (e.g. update_rule), of the epochs at most ``bound``;
    None where it was not logged."""
    values = [value for _, value in entry.result.training.curve.get(key, []) if value <= bound]
    return statistics.mean(values) if values else None


def diagnostics(entries: list[Entry]) -> list[dict]:
    """One dict per run (its checkpoint_best.pt entry) that logged validation BLEU or parameter statistics."""
    rows = []
    for entry in sorted((e for e in entries if e.is_best), key=lambda e: (e.column, row_order(e.row), e.result.seed)):
        moves = validation_moves(entry)
        updates = {kind: mean_statistic(entry, f"update_{kind}", UPDATE_BOUND) for kind in KINDS}
        if moves is None and not any(updates.values()):
            continue
        rows.append(
            {
                "row": entry.row,
                "column": entry.column,
                "seed": entry.result.seed,
                "untraced": entry.trace.state == UNTRACED,
                "valid_move_mean": moves and moves[0],
                "valid_move_max": moves and moves[1],
                **{f"update_{kind}": value for kind, value in updates.items()},
                "rule_over_factor": updates["rule"] / updates["factor"]
                if updates["rule"] and updates["factor"]
                else None,
            }
        )
    return rows


def markdown(rows: list[dict]) -> str:
    """The report's section: one line per run."""
    if not rows:
        return ""
    kinds = [kind for kind in KINDS if any(row[f"update_{kind}"] is not None for row in rows)]
    fmt = lambda value, spec: "" if value is None else format(value, spec)  # noqa: E731
    lines = [
        "## Training diagnostics",
        "",
        "How far the validation BLEU moved from one epoch to the next on the run's plateau (from the first epoch "
        f"at {PLATEAU:.0%} of its best; mean and largest absolute change), "
        "and, where the run logged its parameter statistics (--log-parameter-stats), the mean over epochs "
        "of each kind's relative update per step, ||after - before|| / max(||before||, ||after||) (epochs "
        f"above {UPDATE_BOUND:g}, quotients by a zero norm in records older than the bound, left out); "
        "rule/factor: the rules' relative update over the factors'.",
        "",
        "| run | seed | valid BLEU move: mean | largest | "
        + " | ".join(f"update: {kind}" for kind in kinds)
        + (" | rule/factor |" if "rule" in kinds else " |"),
        "|" + "---|" * (4 + len(kinds) + ("rule" in kinds)),
    ]
    for row in rows:
        name = f"{row['row']} {MARK}" if row["untraced"] else row["row"]
        cells = [name, str(row["seed"]), fmt(row["valid_move_mean"], ".2f"), fmt(row["valid_move_max"], ".2f")]
        cells += [fmt(row[f"update_{kind}"], ".2e") for kind in kinds]
        if "rule" in kinds:
            cells.append(fmt(row["rule_over_factor"], ".2f"))
        lines.append("| " + " | ".join(cells) + " |")
    if any(row["untraced"] for row in rows):
        lines += ["", FOOTNOTE]
    return "\n".join(lines) + "\n"


def plot_parameter_statistics(entries: list[Entry], path: Path) -> bool:
    """Relative update and gradient norm of each kind against updates, and the validation BLEU: one line per
    run (checkpoint_best.pt's entries). Writes nothing and returns False where no run logged statistics."""
    runs = [e for e in entries if e.is_best and any(k.startswith("update_") for k in e.result.training.curve)]
    if not runs:
        path.unlink(missing_ok=True)  # an earlier report's plot would describe other runs
        return False
    from .plots import pyplot

    plt = pyplot()
    runs.sort(key=lambda e: (row_order(e.row), e.result.seed))
    fig, axes = plt.subplots(3, len(SHOWN), figsize=(4.2 * len(SHOWN), 10), squeeze=False, sharex=True)
    for i, entry in enumerate(runs):
        curve = entry.result.training.curve
        label = entry.row if len({e.row for e in runs}) == len(runs) else f"{entry.row} seed {entry.result.seed}"
        style = dict(color=f"C{i % 10}", lw=1.2, ls="-" if i < 10 else "--", label=label)
        for column, kind in enumerate(SHOWN):
            for row, statistic in enumerate(("update", "gnorm")):
                points = curve.get(f"{statistic}_{kind}")
                if points:
                    axes[row][column].plot(*zip(*points), **style)
        if curve.get("valid_bleu"):
            axes[2][0].plot(*zip(*curve["valid_bleu"]), marker="o", ms=2.5, **style)
        if curve.get("pnorm_rule"):
            axes[2][1].plot(*zip(*curve["pnorm_rule"]), **style)
        if curve.get("pnorm_factor"):
            axes[2][2].plot(*zip(*curve["pnorm_factor"]), **style)
        if curve.get("update_rule") and curve.get("update_factor"):
            ratio = [(n, r / f) for (n, r), (_, f) in zip(curve["update_rule"], curve["update_factor"]) if f]
            axes[2][3].plot(*zip(*ratio), **style)
    for column, kind in enumerate(SHOWN):
        axes[0][column].set_title(f"{kind}: relative update per step")
        axes[1][column].set_title(f"{kind}: gradient norm")
        axes[0][column].set_yscale("log")
        axes[1][column].set_yscale("log")
    titles = ("validation BLEU", "rule: parameter norm", "factor: parameter norm", "rule / factor relative update")
    for ax, title in zip(axes[2], titles):
        ax.set_title(title)
    for ax in axes.flat:
        ax.grid(alpha=0.3)
    for ax in axes[2]:
        ax.set_xlabel("updates")
    axes[2][0].legend(fontsize=7)  # the one panel every run draws in
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("runs", type=Path, help="a folder of runs, as phm-collect reads")
    parser.add_argument("--rows", nargs="+", help="only these rows (configs), e.g. transformer phm_n4")
    parser.add_argument("--seeds", nargs="+", type=int, help="only these seeds' runs, e.g. 1")
    parser.add_argument("--out", type=Path, required=True, help="the plot (.png; its folder is made)")
    args = parser.parse_args(argv)
    # checked before the work: a plot that cannot be written would fail only at the end
    check_out(parser, args.out)
    try:
        entries = load_results(args.runs)
    except ReportError as error:
        parser.exit(1, f"error: {error}\n")
    entries = select(parser, entries, args)
    if not plot_parameter_statistics(entries, args.out):
        chosen = " of the chosen rows and seeds" if args.rows or args.seeds else ""
        parser.exit(1, f"no run{chosen} below {args.runs} logged parameter statistics (--log-parameter-stats)\n")
    print(markdown(diagnostics(entries)))


def check_out(parser, out: Path) -> None:
    """--out: a file that can be written where it says, or an error before any work."""
    from matplotlib.backend_bases import FigureCanvasBase

    formats = FigureCanvasBase.get_supported_filetypes()
    if out.suffix and out.suffix[1:].lower() not in formats:
        parser.error(f"--out {out}: matplotlib cannot write {out.suffix} files; use one of .{', .'.join(formats)}")
    if out.is_dir():
        parser.error(f"--out {out} is a folder: give the plot's file, e.g. {out / 'parameter_stats.png'}")
    for parent in (out.parent, *out.parent.parents):
        if parent.exists() and not parent.is_dir():
            parser.error(f"--out {out}: {parent} is a file, not a folder")
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        parser.error(f"--out {out}: cannot make its folder: {error}")


def select(parser, entries: list[Entry], args) -> list[Entry]:
    """The entries of --rows and --seeds; a row or a seed that no run has is an error naming those there are."""
    rows = sorted({e.row for e in entries if e.is_best}, key=row_order)
    missing = [row for row in args.rows or () if row not in rows]
    if missing:
        parser.error(f"--rows {' '.join(missing)}: no such row below {args.runs}; its rows: {', '.join(rows)}")
    entries = [e for e in entries if not args.rows or e.row in args.rows]
    seeds = sorted({e.result.seed for e in entries})
    missing = [seed for seed in args.seeds or () if seed not in seeds]
    if missing:
        which = f"the runs of {', '.join(args.rows)}" if args.rows else f"the runs below {args.runs}"
        parser.error(
            f"--seeds {' '.join(map(str, missing))}: no such run; {which} have seeds {', '.join(map(str, seeds))}"
        )
    return [e for e in entries if not args.seeds or e.result.seed in args.seeds]


if __name__ == "__main__":
    main()
