"""Fit or generalisation: where a model loses against the dense frontier. For each run, each seed's training
loss (fairseq's, with dropout and label smoothing on: the objective it minimised, averaged over the epoch's
logged updates) and validation loss at its best epoch (the checkpoint the test scores come from); the dense
models' values as a curve over parameters without embeddings, and every other model read against that curve
at its own size. A model that trains to a lower loss than the dense model of its size and still validates
higher loses on generalisation, not on fit.

    python -m phm_experiments.report.fit --out results/fit_multi30k \\
        --dense converged/multi30k/transformer_equal_params_lr008 converged/multi30k/transformer \\
        --point "PHM n=4" converged/multi30k/phm_n4_lr008

Each run is named by its folder below --runs-dir (results/runs), its seeds averaged; runs that stopped at
different epochs are compared at their own best epochs. Writes OUT.md, OUT.json and OUT.png.
"""

import functools
import json
import statistics
from pathlib import Path

import numpy

from ..results import Result, Training
from ..run_folder import EVAL_LOSSES
from .aggregate import ReportError, load_results, run_rows
from .frontier import against_the_curve, on_curve, point, untraced
from .plots import palette, pyplot
from .trace import FOOTNOTE, MARK

LOSSES = ("train", "valid")


def epochs(training: Training) -> list[dict]:
    """Each epoch's training loss (the mean of the points logged during it) and validation loss, from the
    record's curve: its validation points are the epochs' ends, one per epoch."""
    train, valid = training.curve.get("train", []), training.curve.get("valid", [])
    rows, start = [], 0
    for epoch, (end, valid_loss) in enumerate(valid, start=1):
        logged = [loss for updates, loss in train if start < updates <= end]
        rows.append({"epoch": epoch, "train": statistics.fmean(logged) if logged else None, "valid": valid_loss})
        start = end
    return rows


def at_best_epoch(result: Result, rows: list[dict], where: Path) -> dict:
    """The row of ``epochs(result.training)`` (``rows``) at the run's best epoch: the epoch of checkpoint_best.pt,
    the last to reach the best validation score."""
    best = result.training.checkpoint_best_epoch
    if best is None or not 1 <= best <= len(rows) or rows[best - 1]["train"] is None:
        raise ReportError(f"{where}: its record has no training and validation loss at its best epoch ({best})")
    return rows[best - 1]


def losses(runs_dir: Path, name: str) -> dict:
    """The run's losses at each seed's best epoch (each seed's row, their mean and sample sd), each seed's
    epochs, and the losses with dropout off of the seeds that have them."""
    records = sorted((runs_dir / name).glob("seed*/result.json"))
    results = [Result.read(file) for file in records]
    seeds = [epochs(result.training) for result in results]
    best = [at_best_epoch(result, rows, file) for result, rows, file in zip(results, seeds, records)]
    values = {"best_epoch_rows": best, "epochs": seeds}
    values["dropout_off"] = [
        {"seed": result.seed, "epoch": row["epoch"], "train_dropout_on": row["train"], **measured}
        for result, row, file in zip(results, best, records)
        if (measured := dropout_off(file.parent))
    ]
    for key in LOSSES:
        at_best = [row[key] for row in best]
        values[f"{key}_loss"] = round(statistics.fmean(at_best), 3)
        values[f"{key}_loss_std"] = round(statistics.stdev(at_best), 3) if len(at_best) > 1 else None
    values["generalisation_gap"] = round(values["valid_loss"] - values["train_loss"], 3)
    values["best_epochs"] = " / ".join(str(row["epoch"]) for row in best)
    return values


def dropout_off(seed_folder: Path) -> dict | None:
    """The seed's training and validation loss with dropout off at its best checkpoint, where measured
    (eval_losses.json; python -m phm_experiments.eval_losses)."""
    file = seed_folder / EVAL_LOSSES
    if not file.is_file():
        return None
    measured = json.loads(file.read_text(encoding="utf-8"))["losses"]
    return {"train": measured["train"]["loss"], "valid": measured["valid"]["loss"]}


def fit(runs_dir: Path, dense: list[str], points: dict[str, str]) -> dict:
    rows_of = functools.cache(lambda folder: {row.row: row for row in run_rows(load_results(folder))})

    def run(name: str) -> dict:
        return {**point(rows_of, runs_dir, name), **losses(runs_dir, name)}

    curve = sorted((run(name) for name in dense), key=lambda p: p["params_no_emb"])
    models = {label: run(name) for label, name in points.items()}
    for values in models.values():
        for key in ("train_loss", "valid_loss"):
            height = on_curve(curve, values["params_no_emb"], key, digits=3)
            values[f"{key}_above"] = None if height is None else round(values[key] - height, 3)
        values["loses_on"] = loses_on(values)
    band = dense_band(curve)
    for values in (*curve, *models.values()):
        values["above_band"], values["band_epochs"] = above_band(band, values)
    return {"metric": curve[0]["metric"], "dense": curve, "points": models, "band": band}


def dense_band(curve: list[dict]) -> dict:
    """Validation loss as a function of training loss across the dense models: a quadratic through every
    seed's epochs of every dense model, over the training losses from the lowest any reached to the highest
    any had at its best epoch (the converged end, where the models are compared)."""
    high = max(row["train"] for p in curve for row in p["best_epoch_rows"])
    points = [(row["train"], row["valid"]) for p in curve for row in all_epochs(p) if row["train"] <= high]
    train, valid = numpy.array(points).T
    coefficients = numpy.polyfit(train, valid, 2)
    residual = valid - numpy.polyval(coefficients, train)
    return {
        "coefficients": [float(c) for c in coefficients],
        "train_range": [round(float(train.min()), 3), round(high, 3)],
        "residual_sd": round(float(residual.std(ddof=1)), 3),
        "epochs": len(points),
    }


def above_band(band: dict, values: dict) -> tuple:
    """The mean of (validation loss - the dense band's at the same training loss) over the run's epochs
    within the band's range (every seed's), and how many epochs that is."""
    low, high = band["train_range"]
    points = [(row["train"], row["valid"]) for row in all_epochs(values) if low <= row["train"] <= high]
    if not points:
        return None, 0
    train, valid = numpy.array(points).T
    return round(float(numpy.mean(valid - numpy.polyval(band["coefficients"], train))), 3), len(points)


def all_epochs(values: dict) -> list[dict]:
    return [row for seed in values["epochs"] for row in seed if row["train"] is not None]


def loses_on(values: dict) -> str:
    """The reading of a model against the dense curve at its size."""
    train, valid = values["train_loss_above"], values["valid_loss_above"]
    if train is None or valid is None:
        return ""  # outside the curve's range
    if valid <= 0:
        return "neither: validates as well or better"
    return "generalisation: fits better, validates worse" if train <= 0 else "fit: trains and validates worse"


def markdown(title: str, result: dict, command: str) -> str:
    def loss(values, key):
        std = values.get(f"{key}_std")
        return f"{values[key]:.3f}" + (f" ± {std:.3f}" if std is not None else "")

    def above(values, key):
        return "" if values.get(f"{key}_above") is None else f"{values[f'{key}_above']:+.3f}"

    band = result["band"]
    lines = [
        f"# {title}",
        "",
        "Loss (fairseq's label-smoothed cross entropy, base 2) at each seed's best epoch (the checkpoint the test "
        "scores come from), mean ± sd over seeds: training (dropout on, the mean over the epoch's logged updates) "
        "and validation; \"vs dense\": minus the dense curve's at the model's parameters without embeddings "
        "(interpolated in log parameters). A model below the dense curve in training loss and above it in "
        'validation loss loses on generalisation, not on fit. "Above the band": the mean over the model\'s '
        "epochs (every seed's) of its validation loss minus the dense models' at the same training loss: "
        f"a quadratic through the dense models' {band['epochs']} epochs with training loss from "
        f"{band['train_range'][0]:.3f} to {band['train_range'][1]:.3f} (the highest at a dense model's best epoch); "
        f"their residuals' sd {band['residual_sd']:.3f}.",
        "",
        "| model | run | parameters without embeddings | seeds | best epochs | training loss | vs dense "
        "| validation loss | vs dense | validation - training | loses on | above the band (epochs) | machines "
        "| traced |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    rows = [("dense", p) for p in result["dense"]] + list(result["points"].items())
    for label, values in rows:
        traced = values["traced"] + (f" {MARK}" if untraced(values) else "")
        lines.append(
            f"| {label} | {values['run']} | {values['params_no_emb']:,} | {values['seeds']} | {values['best_epochs']} "
            f"| {loss(values, 'train_loss')} | {above(values, 'train_loss')} | {loss(values, 'valid_loss')} "
            f"| {above(values, 'valid_loss')} | {values['generalisation_gap']:.3f} | {values.get('loses_on', '')} "
            f"| {band_cell(values)} | {values['machines']} | {traced} |"
        )
    if any(untraced(values) for _, values in rows):
        lines += ["", f"traced: each seed's record; {FOOTNOTE}"]
    lines += dropout_off_table(rows)
    lines += ["", "Made by:", "", "```", command, "```", ""]
    return "\n".join(lines)


def dropout_off_table(rows: list) -> list[str]:
    """Each measured seed's losses at its best checkpoint with dropout off, beside its training loss with
    dropout on; nothing where no run has them."""
    measured = [(label, values["run"], seed) for label, values in rows for seed in values["dropout_off"]]
    if not measured:
        return []
    lines = [
        "",
        "## With dropout off",
        "",
        "The same loss of each seed's best checkpoint (checkpoint_best.pt) on the whole training and validation "
        "sets with dropout off (`python -m phm_experiments.eval_losses`: fairseq-validate, label smoothing as "
        "trained; eval_losses.json beside the seed's record), where measured: the checkpoints stay on the machine "
        "that trained them. Its validation loss is the record's, checked to the digit.",
        "",
        "| model | run | seed | best epoch | training loss, dropout on | training loss, dropout off "
        "| validation loss | validation - training (dropout off) |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for label, run, seed in measured:
        lines.append(
            f"| {label} | {run} | {seed['seed']} | {seed['epoch']} | {seed['train_dropout_on']:.3f} "
            f"| {seed['train']:.3f} | {seed['valid']:.3f} | {seed['valid'] - seed['train']:.3f} |"
        )
    return lines


def band_cell(values: dict) -> str:
    if values["above_band"] is None:
        return "no epoch in its range"
    return f"{values['above_band']:+.3f} ({values['band_epochs']})"


def plot(result: dict, path: Path, title: str) -> None:
    """Left: validation against training loss at the best epoch (the dense curve a line); right: the first
    seed's epochs on the same axes, each model's path as it trained."""
    plt = pyplot()
    fig, (best, paths) = plt.subplots(1, 2, figsize=(12, 5.4))
    curve = result["dense"]
    best.errorbar(
        [p["train_loss"] for p in curve],
        [p["valid_loss"] for p in curve],
        xerr=[p["train_loss_std"] or 0 for p in curve],
        yerr=[p["valid_loss_std"] or 0 for p in curve],
        marker="s",
        capsize=3,
        color="black",
        label="dense",
    )
    for p in curve:
        best.annotate(
            f"{p['params_no_emb'] / 1e3:.0f}k",
            (p["train_loss"], p["valid_loss"]),
            xytext=(5, -10),
            textcoords="offset points",
            fontsize=7,
        )
    for i, (name, values) in enumerate(result["points"].items()):
        best.errorbar(
            [values["train_loss"]],
            [values["valid_loss"]],
            xerr=[values["train_loss_std"] or 0],
            yerr=[values["valid_loss_std"] or 0],
            marker="o",
            capsize=3,
            linestyle="none",
            color=palette(i),
            label=f"{name} ({values['params_no_emb'] / 1e3:.0f}k)" + (f" {MARK}" if untraced(values) else ""),
        )
    shades = [str(0.15 + 0.55 * i / max(1, len(curve) - 1)) for i in range(len(curve))]
    for shade, p in zip(shades, curve):
        paths.plot(*trajectory(p), color=shade, lw=1.2)
    for i, values in enumerate(result["points"].values()):
        paths.plot(*trajectory(values), color=palette(i), lw=1)
    band = result["band"]
    train = numpy.linspace(*band["train_range"], 50)
    paths.plot(train, numpy.polyval(band["coefficients"], train), "k--", lw=1.5)
    best.set_title("at the best epoch (mean over seeds)", fontsize=9)
    paths.set_title("each epoch, the first seed (dense: grey, darker is smaller; dashed: their band)", fontsize=9)
    for ax in (best, paths):
        ax.set_xlabel("training loss (dropout on)")
        ax.set_ylabel("validation loss")
        ax.grid(alpha=0.3)
    lo = min(p["valid_loss"] for p in (*curve, *result["points"].values()))
    paths.set_ylim(lo - 0.05, lo + 0.6)  # the early epochs' losses would flatten the converged end
    paths.set_xlim(right=max(p["train_loss"] for p in (*curve, *result["points"].values())) + 1.0)
    handles, labels = best.get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=4, fontsize=8, frameon=False)
    fig.suptitle(title, fontsize=10)
    fig.tight_layout(rect=(0, 0.06 + 0.035 * -(-len(labels) // 4), 1, 1))
    fig.savefig(path, dpi=120)
    plt.close(fig)


def trajectory(values: dict) -> tuple[list, list]:
    rows = [row for row in values["epochs"][0] if row["train"] is not None]  # the first seed's
    return [row["train"] for row in rows], [row["valid"] for row in rows]


def main(argv=None):
    title = "Fit or generalisation, against the dense frontier"
    against_the_curve("phm_experiments.report.fit", __doc__, title, fit, markdown, plot, argv)


if __name__ == "__main__":
    main()
