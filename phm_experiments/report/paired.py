"""Seed-paired gaps: each model's runs set against a reference model's run of the same seed, on the same
machine, under one protocol. Where two CPUs train one seed 0.5-1 BLEU apart, a gap between means made on
different machines says little; a gap per seed pair, each pair trained alike, says what differs.

    python -m phm_experiments.report.paired --out results/converged_multi30k_iwslt_paired \\
        --runs converged/multi30k_iwslt \\
        --against transformer transformer_equal_params \\
        --models transformer_equal_params phm_n4 phm_n2_lr004 quaternion

For each model, each seed's test score of the best checkpoint, of the average of the last checkpoints, and
its best validation score (what chose the checkpoint); their mean and sample standard deviation. For each
reference and model, the gap (model minus reference) of each seed that both ran on one machine (the same
CPU, torch CPU kernels, threads and pinned kernel variables) from records whose code can be traced, and the
gaps' mean and sample standard deviation. A seed left out of a pair is listed with the reason. Writes
OUT.md, OUT.json and OUT.png.
"""

import argparse
import statistics
from pathlib import Path

from ..results import Result
from . import files
from .aggregate import ReportError
from .plots import palette, pyplot
from .trace import UNTRACED, trace_record
from .width import metric_name

# the three figures of a run: (key, as the tables name it)
MEASURES = (("test_best", "test, best checkpoint"), ("test_last", "test, last checkpoints averaged"),
            ("valid_best", "validation, best"))  # fmt: skip


def seed_figures(folder: Path) -> dict[int, dict]:
    """{seed: its figures, machine and trace} of the runs in ``folder`` (<folder>/seed<S>/result.json)."""
    seeds = {}
    for file in sorted(folder.glob("seed*/result.json")):
        result = Result.read(file)
        env = result.environment
        averaged = result.averaged_evaluation
        seeds[result.seed] = {
            "test_best": result.evaluation.score,
            "test_last": averaged.score if averaged else None,
            "valid_best": result.training.best_valid,
            "metric": result.evaluation.metric,
            "machine": {
                "device": env.device,
                "cpu_kernels": env.cpu_capability,
                "threads": env.threads,
                "pinned": env.kernels,  # the variables that chose the kernels (kernels.py)
            },
            "commit": env.git_commit,
            "trace": trace_record(result, file.parent).state,
        }
    return seeds


def spread(values: list) -> dict:
    """Mean and sample standard deviation (None for fewer than two values) of the values that exist."""
    values = [v for v in values if v is not None]
    if not values:
        return {"mean": None, "sd": None, "n": 0}
    sd = statistics.stdev(values) if len(values) > 1 else None
    return {"mean": round(statistics.fmean(values), 2), "sd": None if sd is None else round(sd, 2), "n": len(values)}


def unpaired_reason(model: dict, reference: dict) -> str | None:
    """Why a seed's two runs do not make a pair, or None where they do."""
    if UNTRACED in (model["trace"], reference["trace"]):
        return "a record whose code cannot be traced"
    differing = [
        f"{field} {model['machine'][field]} vs {reference['machine'][field]}"
        for field in model["machine"]
        if model["machine"][field] != reference["machine"][field]
    ]
    return f"trained apart: {', '.join(differing)}" if differing else None


def paired(runs: dict[str, dict[int, dict]], against: list[str], models: list[str]) -> dict:
    """The report's figures: each model's seeds and their spread, and each (reference, model) pair's gaps."""
    metrics = {figures["metric"] for seeds in runs.values() for figures in seeds.values()}
    if len(metrics) > 1:
        raise ReportError(f"the runs are scored by {' and '.join(sorted(metrics))}, not one metric")
    table = {
        name: {"seeds": seeds, **{key: spread([s[key] for s in seeds.values()]) for key, _ in MEASURES}}
        for name, seeds in runs.items()
    }
    pairs = []
    for reference in against:
        for model in models:
            if model == reference:
                continue
            gaps, left_out = {}, {}
            for seed in sorted(set(runs[model]) | set(runs[reference])):
                if seed not in runs[model] or seed not in runs[reference]:
                    left_out[seed] = f"no run of {model if seed not in runs[model] else reference}"
                    continue
                a, b = runs[model][seed], runs[reference][seed]
                reason = unpaired_reason(a, b)
                if reason:
                    left_out[seed] = reason
                    continue
                gaps[seed] = {
                    key: None if a[key] is None or b[key] is None else round(a[key] - b[key], 2) for key, _ in MEASURES
                }
            summary = {key: spread([g[key] for g in gaps.values()]) for key, _ in MEASURES}
            ahead = {key: sum(1 for g in gaps.values() if g[key] is not None and g[key] > 0) for key, _ in MEASURES}
            pairs.append({"model": model, "reference": reference, "gaps": gaps, "summary": summary,
                          "ahead": ahead, "left_out": left_out})  # fmt: skip
    return {"metric": metrics.pop() if metrics else None, "models": table, "pairs": pairs}


def _spread_text(s: dict, signed=False) -> str:
    if s["mean"] is None:
        return ""
    return (f"{s['mean']:+.2f}" if signed else f"{s['mean']:.2f}") + (
        f" ± {s['sd']:.2f}" if s["sd"] is not None else ""
    )


def _per_seed(values: dict, key: str, signed=False) -> str:
    shown = [values[seed][key] for seed in sorted(values)]
    return " / ".join("–" if v is None else (f"{v:+.2f}" if signed else f"{v:.2f}") for v in shown)


def markdown(title: str, result: dict, command: str) -> str:
    name = metric_name(result)
    lines = [
        f"# {title}",
        "",
        f"{name} of each seed (seeds in order, `a / b / c`) and their mean ± sample standard deviation. "
        "test: the test set, scored from the best checkpoint (chosen on validation) and from the average of the "
        f"last checkpoints; validation: the best validation {name} during training.",
        "",
        "| model | seeds | test, best | mean ± sd | test, last averaged | mean ± sd | validation, best | mean ± sd "
        "| machine | traced |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for model, row in result["models"].items():
        seeds = row["seeds"]
        machines = sorted({f"{s['machine']['device']}, {s['machine']['cpu_kernels']}" for s in seeds.values()})
        traces = " / ".join(seeds[s]["trace"] for s in sorted(seeds))
        lines.append(
            f"| {model} | {' '.join(map(str, sorted(seeds)))} | {_per_seed(seeds, 'test_best')} | "
            f"{_spread_text(row['test_best'])} | {_per_seed(seeds, 'test_last')} | {_spread_text(row['test_last'])} | "
            f"{_per_seed(seeds, 'valid_best')} | {_spread_text(row['valid_best'])} | {'; '.join(machines)} | {traces} |"
        )
    lines += [
        "",
        "Gaps per seed pair (model minus reference, the same seed trained on one machine from traceable records; "
        "`ahead`: the seeds where the model scores higher):",
        "",
        "| model | reference | paired seeds | test, best: per seed | mean ± sd | ahead | test, last averaged: per seed "
        "| mean ± sd | ahead | validation, best: per seed | mean ± sd | ahead | left out |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for pair in result["pairs"]:
        gaps, n = pair["gaps"], len(pair["gaps"])
        cells = []
        for key, _ in MEASURES:
            counted = pair["summary"][key]["n"]
            cells += [
                _per_seed(gaps, key, signed=True) if gaps else "",
                _spread_text(pair["summary"][key], signed=True),
                f"{pair['ahead'][key]} of {counted}" if counted else "",
            ]
        left = "; ".join(f"seed {seed}: {why}" for seed, why in pair["left_out"].items())
        seeds = " ".join(map(str, sorted(gaps))) or "none"
        lines.append(f"| {pair['model']} | {pair['reference']} | {seeds} ({n}) | {' | '.join(cells)} | {left} |")
    if result["without_runs"]:
        lines += ["", f"Without a finished run, left out: {', '.join(result['without_runs'])}."]
    lines += ["", "Made by:", "", "```", command, "```", ""]
    return "\n".join(lines)


def plot(result: dict, path: Path, title: str) -> None:
    """One panel per reference: each model's gap per seed (dots) and their mean (a bar), for each measure."""
    plt = pyplot()
    references = list(dict.fromkeys(p["reference"] for p in result["pairs"]))
    fig, axes = plt.subplots(1, max(1, len(references)), figsize=(5.5 * max(1, len(references)), 4.2), squeeze=False)
    for ax, reference in zip(axes[0], references):
        pairs = [p for p in result["pairs"] if p["reference"] == reference]
        ax.axhline(0, color="black", linewidth=1)
        for j, (key, label) in enumerate(MEASURES):
            offset = (j - 1) * 0.22
            for i, pair in enumerate(pairs):
                values = [g[key] for g in pair["gaps"].values() if g[key] is not None]
                if not values:
                    continue
                ax.scatter([i + offset] * len(values), values, s=14, color=palette(j), alpha=0.8,
                           label=label if i == 0 else None)  # fmt: skip
                ax.hlines(statistics.fmean(values), i + offset - 0.09, i + offset + 0.09, color=palette(j), linewidth=2)
        if not any(pair["gaps"] for pair in pairs):
            ax.text(0.5, 0.5, "no seed pair on one machine", transform=ax.transAxes, ha="center", color="gray")
        ax.set_xticks(range(len(pairs)), [f"{p['model']}\n({len(p['gaps'])} seeds)" for p in pairs], fontsize=8)
        ax.set_title(f"minus {reference}, per seed pair", fontsize=10)
        ax.set_ylabel(f"{metric_name(result)} gap")
        ax.grid(alpha=0.3, axis="y")
    if axes[0][0].get_legend_handles_labels()[0]:  # a panel without a pair has nothing to name
        axes[0][0].legend(fontsize=7)
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs-dir", type=Path, default=Path("results/runs"))
    parser.add_argument("--runs", required=True, help="the folder below --runs-dir that holds the config folders")
    parser.add_argument("--against", nargs="+", required=True, help="the reference models (config folders)")
    parser.add_argument("--models", nargs="+", required=True, help="the models set against each reference")
    parser.add_argument("--title", default="Gaps per seed pair")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args(argv)
    files.check_out(parser, args.out)
    runs, missing = {}, []
    for name in dict.fromkeys([*args.against, *args.models]):
        folder = args.runs_dir / args.runs / name
        if any(folder.glob("seed*/result.json")):
            runs[name] = seed_figures(folder)
        elif name in args.against:  # nothing to set the models against
            parser.error(f"--against {name}: {folder} has no finished run (seed*/result.json)")
        else:  # a model whose first seed has not finished: the report names it
            missing.append(name)
    try:
        result = paired(runs, args.against, [name for name in args.models if name in runs])
        result["without_runs"] = missing
    except ReportError as error:
        parser.exit(2, f"phm_experiments.report.paired: {error}\n")
    files.write("phm_experiments.report.paired", argv, args.out, result, args.title, markdown, plot)


if __name__ == "__main__":
    main()
