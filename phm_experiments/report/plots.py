"""The report's plots (matplotlib, imported only here): OUT.png from its rows, OUT.curves.png and
OUT.epochs.png from the runs' entries."""

import statistics
from pathlib import Path

from .aggregate import Entry, Row, row_order


def pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def plot_scores(rows: list[Row], path: Path):
    """The frontier: score against parameters without embeddings (left) and in all (right), each
    model a point with its seeds' standard deviation, one line per corpus, sorted by parameters."""
    plt = pyplot()
    import matplotlib.ticker

    rows = [r for r in rows if "@" not in r.row]  # a run's epochs have its parameters: its final score only
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.5))
    for ax, (key, label) in zip(axes, (("params_no_emb", "parameters without embeddings"), ("params", "parameters"))):
        for i, column in enumerate(sorted({r.column for r in rows})):
            sel = sorted((r for r in rows if r.column == column), key=lambda r: getattr(r, key))
            ax.errorbar(
                [getattr(r, key) for r in sel],
                [r.score for r in sel],
                yerr=[r.score_std or 0 for r in sel],
                fmt="o-",
                color=f"C{i}",
                lw=1,
                capsize=3,
                label=column,
            )
            for r in sel:
                ax.annotate(r.row, (getattr(r, key), r.score), textcoords="offset points", xytext=(4, 4), fontsize=7)
        if key == "params_no_emb":  # from a few thousand (n=16, shared rule) to the dense layers: a log scale
            ax.set_xscale("log")
        else:  # the embeddings keep every model within a factor of 2 or so: linear, in millions
            ax.xaxis.set_major_formatter(matplotlib.ticker.FuncFormatter(lambda value, _: f"{value / 1e6:.2f}M"))
        ax.set_xlabel(label)
        ax.set_ylabel(rows[0].metric + (" (mean ± sd over seeds)" if any(r.score_std for r in rows) else ""))
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def learning_curve(entry: Entry):
    """(updates, training loss) and (updates, validation loss) pairs of a run, from its result."""
    curve = entry.result.training.curve
    return curve.get("train", []), curve.get("valid", [])


def plot_curves(entries: list[Entry], path: Path):
    """Training (lines) and validation (dots) loss against updates: one panel per corpus."""
    plt = pyplot()
    runs = [entry for entry in entries if entry.is_best]  # one curve per run
    columns = sorted({entry.column for entry in runs})
    fig, axes = plt.subplots(1, len(columns), figsize=(5.5 * len(columns), 4), squeeze=False)
    for ax, column in zip(axes[0], columns):
        for i, entry in enumerate(sorted((e for e in runs if e.column == column), key=lambda e: row_order(e.row))):
            train, valid = learning_curve(entry)
            if train:
                ax.plot(*zip(*train), color=f"C{i}", lw=1, label=f"{entry.row} train")
            if valid:
                ax.plot(*zip(*valid), "o--", color=f"C{i}", ms=3, lw=1, label=f"{entry.row} valid")
        ax.set_title(column)
        ax.set_xlabel("updates")
        ax.set_ylabel("loss (fairseq's, base 2)")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=6, ncol=2)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def plot_epochs(series: dict, metric: str, path: Path):
    """The points of ``scores_against_updates``, each epoch's mean over seeds (with the standard
    deviation of its score): one line per config, one panel per corpus."""
    plt = pyplot()
    columns = sorted({column for column, _ in series})
    fig, axes = plt.subplots(1, len(columns), figsize=(6.5 * len(columns), 4.5), squeeze=False)
    for ax, column in zip(axes[0], columns):
        for config in sorted((config for c, config in series if c == column), key=row_order):
            epochs = series[column, config].values()
            points = sorted(
                (
                    statistics.mean(u for u, _ in seeds),
                    statistics.mean(s for _, s in seeds),
                    statistics.stdev(s for _, s in seeds) if len(seeds) > 1 else 0.0,
                )
                for seeds in epochs
            )
            x, y, sd = zip(*points)
            style = "*" if len(points) == 1 else "o-"
            ax.errorbar(x, y, yerr=sd, fmt=style, ms=6, lw=1, capsize=2, label=config)
        ax.set_title(column)
        ax.set_xlabel("training updates (a teacher's included where a run starts from its checkpoint)")
        ax.set_ylabel(metric)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
