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


def frontier(rows: list[Row], key: str) -> list[Row]:
    """The rows that no row of at most their parameters (``key``) matches: the best score at each size."""
    best, kept = float("-inf"), []
    for row in sorted(rows, key=lambda r: (getattr(r, key), -r.score)):
        if row.score > best:
            best = row.score
            kept.append(row)
    return kept


def dodge(xs: list[float], within=0.02, step=7.0) -> list[float]:
    """Horizontal offsets, in points, that set apart the points whose x lie within a relative ``within``
    of each other (models of the same size), centred on their x; a lone point keeps 0."""
    offsets = [0.0] * len(xs)
    order = sorted(range(len(xs)), key=lambda i: xs[i])
    groups = []
    for i in order:
        if groups and xs[i] <= xs[groups[-1][0]] * (1 + within):
            groups[-1].append(i)
        else:
            groups.append([i])
    for group in groups:
        for k, i in enumerate(group):
            offsets[i] = (k - (len(group) - 1) / 2) * step
    return offsets


def palette(i: int):
    """The i-th of 20 distinct colours: tab20's ten dark shades, then its ten light ones, so that the
    first ten models get matplotlib's usual C0-C9 and a frontier of up to 20 models repeats none."""
    import matplotlib

    return matplotlib.colormaps["tab20"](2 * (i % 10) + i // 10 % 2)


def plot_scores(rows: list[Row], path: Path):
    """The frontier: score against parameters without embeddings (left) and in all (right). Each model
    is a point with its seeds' standard deviation, in a colour and marker of its own (the legend); a
    dashed staircase per corpus joins the models that no smaller one matches. Models of the same size
    stand a few points apart (``dodge``), so their spreads do not hide each other, around a faint
    vertical line at their exact size."""
    plt = pyplot()
    import matplotlib.ticker
    import matplotlib.transforms

    rows = [r for r in rows if "@" not in r.row]  # a run's epochs have its parameters: its final score only
    models = list(dict.fromkeys(r.row for r in rows))
    style = {m: {"color": palette(i), "marker": "osD^v<>ph*"[i // 20 % 10]} for i, m in enumerate(models)}
    columns = sorted({r.column for r in rows})
    fig, axes = plt.subplots(1, 2, figsize=(13, 5))
    for ax, (key, label) in zip(axes, (("params_no_emb", "parameters without embeddings"), ("params", "parameters"))):
        for column in columns:
            best = frontier([r for r in rows if r.column == column], key)
            name = "frontier" + (f" ({column})" if len(columns) > 1 else "")
            ax.step([getattr(r, key) for r in best], [r.score for r in best], "--", where="post", color="0.6", lw=1)
            ax.plot([], [], "--", color="0.6", lw=1, label=name)
        for r, offset in zip(rows, dodge([getattr(r, key) for r in rows])):
            x, sd = getattr(r, key), r.score_std or 0
            if offset:  # a dodged model: a faint line at its exact size, which the group stands around
                ax.axvline(x, color="0.85", lw=0.8, zorder=0)
            # drawn shifted by a few points; the axes' limits still come from the exact x (a shifted
            # artist does not update them)
            ax.update_datalim([(x, r.score - sd), (x, r.score + sd)])
            shifted = matplotlib.transforms.offset_copy(ax.transData, fig=fig, x=offset, units="points")
            ax.errorbar(x, r.score, yerr=sd, capsize=3, ls="none", transform=shifted, **style[r.row])
        for m in models:
            ax.plot([], [], ls="none", label=m, **style[m])
        if key == "params_no_emb":  # from a few thousand (n=16, shared rule) to the dense layers: a log scale
            ax.set_xscale("log")
        else:  # the embeddings keep every model within a factor of 2 or so: linear, in millions
            ax.xaxis.set_major_formatter(matplotlib.ticker.FuncFormatter(lambda value, _: f"{value / 1e6:.2f}M"))
        ax.margins(x=0.1)  # room for the outermost of a dodged group
        ax.set_xlabel(label)
        ax.set_ylabel(rows[0].metric + (" (mean ± sd over seeds)" if any(r.score_std for r in rows) else ""))
        ax.grid(alpha=0.3)
    handles, labels = axes[0].get_legend_handles_labels()
    fig.tight_layout(rect=(0, 0, 0.82, 1))
    fig.legend(handles, labels, loc="center left", bbox_to_anchor=(0.82, 0.5), fontsize=8)
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
