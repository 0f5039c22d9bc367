"""phm-collect's report: finished runs (phm-run's result.json files) as the paper's tables, with plots.

    phm-collect work/runs/table2 --out work/reports/table2

reads every result.json below the folder; a run's place in it names the row and the column:
work/runs/table2/iwslt14_de_en/phm_n4/seed1 is row phm_n4, column iwslt14_de_en (a folder with
the configs' runs directly in it has one column). Runs of several seeds make one row: the mean
score, its standard deviation and the seeds. A config with evaluate.epochs adds one row per
epoch, named <row>@<N>ep (e.g. phm_n4_ft@2ep: its checkpoint at the end of epoch 2), and one with
evaluate.average_last a row <row>@avg<N> (the average of its last N epoch checkpoints). Writes
    OUT.md    the paper's layout: the score of every model (rows) on every corpus (columns), the
              paper's figure beside it where the config gives one; parameters without embeddings
              and their change against the dense model of the same corpus; then every run with
              its parameters, speeds, seed and exact commands; for runs trained to convergence,
              where each seed's training stopped (best and last epoch, updates, wall time)
    OUT.csv   one line per run, every figure
    OUT.png   score against parameters without embeddings and in all, each model's seed spread
    OUT.curves.png   learning curves (training and validation loss against updates) as the
              runs' fairseq logs reported them
    OUT.epochs.png   (runs with evaluate.epochs) the score after each of those epochs against the
              total training updates, a teacher's included where a run starts from its checkpoint
              (phm-compress + fine-tuning against training from scratch at equal updates)
"""

import csv
import re
import statistics
from dataclasses import dataclass
from pathlib import Path

from .fingerprint import differences
from .results import Evaluation, Result


class ReportError(RuntimeError):
    pass


@dataclass
class Entry:
    """One evaluation of one run, placed in the table: checkpoint_best.pt's, an epoch's, or the
    average of the last epochs' (evaluate.average_last)."""

    result: Result
    evaluation: Evaluation
    row: str
    column: str
    dir: Path

    @property
    def is_best(self) -> bool:
        """checkpoint_best.pt's evaluation: the run's own row"""
        return self.evaluation is self.result.evaluation


def load_results(root: Path) -> list:
    """Every run's result.json below ``root``: its evaluations as entries of the table."""
    if not root.is_dir():
        raise ReportError(f"{root}: no such folder of runs")
    entries = []
    for file in sorted(root.rglob("result.json")):
        result = Result.read(file)
        config_dir = file.parent.parent.relative_to(root)  # .../<config>/seed<S>/result.json
        column = str(config_dir.parent) if str(config_dir.parent) != "." else root.name
        for evaluation in result.evaluations:
            row = config_dir.name
            if evaluation.epoch is not None:
                row += f"@{evaluation.epoch}ep"
            elif evaluation.averaged:
                row += f"@avg{len(evaluation.averaged)}"
            entries.append(Entry(result, evaluation, row, column, file.parent))
    if not entries:
        raise ReportError(f"no result.json under {root} (run `phm-run` first)")
    return entries


def mean(values):
    values = [v for v in values if v is not None]
    return sum(values) / len(values) if values else None


def is_dense(entry) -> bool:
    return entry.result.parameters.dense_total == entry.result.parameters.total


def row_order(name: str):
    """Dense first, then quaternion, then PHM by n: the paper's order; epochs of a run after it, in order."""
    name, _, variant = name.partition("@")
    number = re.search(r"(\d+)$", name)
    return (
        "quaternion" in name,
        "phm" in name,
        int(number.group(1)) if number else 0,
        name,
        variant.startswith("avg"),  # a run's average after its epochs
        int(re.sub(r"\D", "", variant) or 0),
    )


def ratio(value, reference):
    return round(value / reference, 3) if value and reference else None


def run_rows(results) -> list:
    """One row per config: its seeds' runs averaged."""
    groups = {}
    for entry in results:
        groups.setdefault((entry.column, entry.row), []).append(entry)
    # the dense model of a corpus: its checkpoint_best.pt rows (not its epochs)
    # (the first in the paper's order where a corpus has several, e.g. a distilled dense student)
    dense = {}
    for (column, row), runs in sorted(groups.items(), key=lambda item: row_order(item[0][1])):
        if is_dense(runs[0]) and "@" not in row:
            dense.setdefault(column, mean_of(runs))
    rows = []
    for (column, name), runs in groups.items():
        check_one_config(runs)
        row = mean_of(runs)
        reference = dense.get(column)
        dense_no_emb = reference["params_no_emb"] if reference else row["dense_params_no_emb"]
        row.update(
            {
                "column": column,
                "row": name,
                "params_change": round(100 * (row["params_no_emb"] / dense_no_emb - 1), 1),
                "train_speed_vs_dense": ratio(row["train_words_per_s"], reference and reference["train_words_per_s"]),
                "eval_speed_vs_dense": ratio(
                    row["eval_examples_per_s"], reference and reference["eval_examples_per_s"]
                ),
            }
        )
        rows.append(row)
    return sorted(rows, key=lambda row: (row["column"], row_order(row["row"])))


def check_one_config(runs) -> None:
    """The seeds of one row ran one config: a config edited after some of its seeds ran (and rerun
    for others only) would otherwise be averaged with them as if it were the same experiment."""
    first = runs[0].result
    for entry in runs[1:]:
        if first.config_values is None or entry.result.config_values is None:
            continue  # written before results held the config: nothing to compare
        changes = differences(
            {k: v for k, v in first.config_values.items() if k != "seed"},
            {k: v for k, v in entry.result.config_values.items() if k != "seed"},
        )
        if changes:
            raise ReportError(
                f"{runs[0].column}/{runs[0].row}: seed {first.seed} and seed {entry.result.seed} ran different "
                "configs, which one row cannot average:\n"
                + "\n".join(f"  {line}" for line in changes)
                + f"\nRun phm-run on {first.config} for every seed again (the ones done with the current "
                "config are kept), or collect the runs in separate folders"
            )


def mean_of(runs) -> dict:
    """The figures of one row, averaged over its seeds' runs."""
    first = runs[0].result
    paper = first.paper or {}
    evaluation = [entry.evaluation for entry in runs]
    training = [entry.result.training for entry in runs]
    scores = [e.score for e in evaluation]
    module = first.parameters.module
    inference = mean(
        e.seconds or (e.examples / e.examples_per_second if e.examples_per_second else None) for e in evaluation
    )
    epoch = evaluation[0].epoch
    chrf = [e.chrf for e in evaluation if e.chrf is not None]
    return {
        "arch": first.arch,
        "metric": evaluation[0].metric,
        "score": round(mean(scores), 2),
        "score_std": round(statistics.stdev(scores), 2) if len(scores) > 1 else None,
        "chrf": round(mean(chrf), 2) if len(chrf) == len(evaluation) else None,
        "chrf_std": round(statistics.stdev(chrf), 2) if len(chrf) == len(evaluation) > 1 else None,
        # where training stopped (runs trained to convergence): each seed's, as "a / b / c"
        "best_epochs": seeds_of(t.best_epoch for t in training),
        "last_epochs": seeds_of(t.last_epoch for t in training),
        "stopped_early": seeds_of(t.stopped_early for t in training),
        "train_hours": seeds_of(
            round(t.total_wall_seconds / 3600, 2) if t.total_wall_seconds else None for t in training
        ),
        "seeds": " ".join(str(entry.result.seed) for entry in runs),
        # the paper's figure is of a finished training, not of an epoch on the way
        "paper_score": paper.get(evaluation[0].metric) if epoch is None else None,
        "params": first.parameters.total,
        "params_no_emb": first.parameters.without_embeddings,
        "dense_params_no_emb": first.parameters.dense_without_embeddings,
        "module_params": f"{module.name}: {module.total:,}" if module else None,
        "paper_params": paper.get("parameters"),
        "train_words_per_s": round(mean(t.words_per_second for t in training) or 0),
        "s_per_100_updates": round(mean(t.seconds_per_100_updates for t in training) or 0, 2),
        "paper_s_per_100_updates": paper.get("seconds_per_100_updates"),
        "eval_examples_per_s": round(mean(e.examples_per_second for e in evaluation) or 0, 1),
        "inference_seconds": round(inference, 1) if inference else None,
        "paper_inference_seconds": paper.get("inference_seconds"),
        # an epoch's row: the updates of its checkpoint
        "updates": int(
            mean(e.updates if e.epoch is not None and e.updates else t.updates for e, t in zip(evaluation, training))
        ),
        "train_commands": [t.command for t in training],
        "evaluate_commands": [e.command for e in evaluation],
    }


def seeds_of(values) -> str:
    """One figure per seed, "a / b / c"; None where no run has it."""
    values = list(values)
    if all(v is None for v in values):
        return None
    return " / ".join("?" if v is None else ("yes" if v is True else "no" if v is False else str(v)) for v in values)


def _cell(value, paper=None):
    text = "" if value is None else f"{value:,}" if isinstance(value, int) else str(value)
    return f"{text} ({paper})" if paper is not None else text


def pivot(rows, value, paper=None) -> list:
    columns = sorted({r["column"] for r in rows})
    names = sorted({r["row"] for r in rows}, key=row_order)
    cells = {(r["row"], r["column"]): _cell(r[value], r.get(paper) if paper else None) for r in rows}
    lines = ["| model | " + " | ".join(columns) + " |", "|---|" + "---|" * len(columns)]
    lines += [f"| {name} | " + " | ".join(cells.get((name, c), "") for c in columns) + " |" for name in names]
    return lines


RUN_COLUMNS = [
    ("column", "corpus"),
    ("row", "model"),
    ("params", "params"),
    ("params_no_emb", "w/o emb."),
    ("params_change", "vs dense %"),
    ("module_params", "counted module"),
    ("score_cell", "score"),
    ("train_words_per_s", "train words/s"),
    ("train_speed_vs_dense", "vs dense"),
    ("s_per_100_updates", "s/100 updates"),
    ("eval_examples_per_s", "eval examples/s"),
    ("eval_speed_vs_dense", "vs dense"),
    ("inference_seconds", "eval s"),
    ("updates", "updates"),
    ("seeds", "seeds"),
]


def markdown(title, rows, results) -> str:
    metric = rows[0]["metric"]
    for r in rows:
        r["score_cell"] = f"{r['score']} ± {r['score_std']}" if r["score_std"] is not None else str(r["score"])
        r["chrf_cell"] = (
            "" if r["chrf"] is None else f"{r['chrf']} ± {r['chrf_std']}" if r["chrf_std"] else str(r["chrf"])
        )
        r["params_cell"] = f"{r['params_no_emb']:,} ({r['params_change']:+.1f}%)"
        if r["module_params"]:
            r["params_cell"] += f"; {r['module_params']}"
    has_paper = any(r["paper_score"] is not None for r in rows)
    several_seeds = any(r["score_std"] is not None for r in rows)
    lines = [
        f"# {title}",
        "",
        f"{metric}"
        + (", mean ± standard deviation over seeds" if several_seeds else "")
        + (" (the paper's figure in parentheses)" if has_paper else "")
        + ":",
        "",
    ]
    lines += pivot(rows, "score_cell", "paper_score")
    lines += [
        "",
        "Parameters without embeddings (change against the dense model of the same corpus, %)"
        + (" and of the counted module" if any(r["module_params"] for r in rows) else "")
        + (" (the paper's figure in parentheses)" if any(r["paper_params"] for r in rows) else "")
        + ":",
        "",
    ]
    lines += pivot(rows, "params_cell", "paper_params")
    if any(r["paper_s_per_100_updates"] or r["paper_inference_seconds"] for r in rows):
        lines += [
            "",
            "Speed (the paper's figure in parentheses, measured on other hardware):",
            "",
            "| model | corpus | s / 100 updates | inference s |",
            "|---|---|---|---|",
        ]
        lines += [
            f"| {r['row']} | {r['column']} | {_cell(r['s_per_100_updates'], r['paper_s_per_100_updates'])} | "
            f"{_cell(r['inference_seconds'], r['paper_inference_seconds'])} |"
            for r in rows
        ]
    if any(r["last_epochs"] for r in rows):
        lines += [
            "",
            "Where training stopped, each seed's (fairseq's --patience on the validation score of "
            "--best-checkpoint-metric; `early` yes: patience ended it, no: the --max-epoch or --max-update cap):",
            "",
            "| model | corpus | score | chrF | best epoch | last epoch | early | updates (mean) | wall hours |",
            "|---|---|---|---|---|---|---|---|---|",
        ]
        lines += [
            f"| {r['row']} | {r['column']} | {r['score_cell']} | {r['chrf_cell']} | {_cell(r['best_epochs'])} | "
            f"{_cell(r['last_epochs'])} | {_cell(r['stopped_early'])} | {r['updates']:,} | {_cell(r['train_hours'])} |"
            for r in rows
            if r["last_epochs"] and "@" not in r["row"]
        ]
    lines += [
        "",
        "Every configuration:",
        "",
        "| " + " | ".join(label for _, label in RUN_COLUMNS) + " |",
        "|" + "---|" * len(RUN_COLUMNS),
    ]
    lines += ["| " + " | ".join(_cell(r[key]) for key, _ in RUN_COLUMNS) + " |" for r in rows]
    env = results[0].result.environment
    lines += [
        "",
        f"Measured with phm-fairseq {env.phm_fairseq} @ {env.git_commit}, torch {env.torch}, "
        f"fairseq {env.fairseq}, Python {env.python} on {env.device} (torch threads: {env.threads}), "
        f"{env.date[:10]}. The commands of each run:",
        "",
    ]
    for r in rows:
        lines.append(f"- {r['column']}/{r['row']}:")
        lines += [f"  `{command}`" for pair in zip(r["train_commands"], r["evaluate_commands"]) for command in pair]
    return "\n".join(lines) + "\n"


def plot_scores(rows, path: Path):
    """The frontier: score against parameters without embeddings (left) and in all (right), each
    model a point with its seeds' standard deviation, one line per corpus, sorted by parameters."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import matplotlib.ticker

    rows = [r for r in rows if "@" not in r["row"]]  # a run's epochs have its parameters: its final score only
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.5))
    for ax, (key, label) in zip(axes, (("params_no_emb", "parameters without embeddings"), ("params", "parameters"))):
        for i, column in enumerate(sorted({r["column"] for r in rows})):
            sel = sorted((r for r in rows if r["column"] == column), key=lambda r: r[key])
            ax.errorbar(
                [r[key] for r in sel],
                [r["score"] for r in sel],
                yerr=[r["score_std"] or 0 for r in sel],
                fmt="o-",
                color=f"C{i}",
                lw=1,
                capsize=3,
                label=column,
            )
            for r in sel:
                ax.annotate(r["row"], (r[key], r["score"]), textcoords="offset points", xytext=(4, 4), fontsize=7)
        if key == "params_no_emb":  # from a few thousand (n=16, shared rule) to the dense layers: a log scale
            ax.set_xscale("log")
        else:  # the embeddings keep every model within a factor of 2 or so: linear, in millions
            ax.xaxis.set_major_formatter(matplotlib.ticker.FuncFormatter(lambda value, _: f"{value / 1e6:.2f}M"))
        ax.set_xlabel(label)
        ax.set_ylabel(rows[0]["metric"] + (" (mean ± sd over seeds)" if any(r["score_std"] for r in rows) else ""))
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def learning_curve(entry: Entry):
    """(updates, training loss) and (updates, validation loss) pairs of a run, from its result."""
    curve = entry.result.training.curve
    return curve.get("train", []), curve.get("valid", [])


def plot_curves(results, path: Path):
    """Training (lines) and validation (dots) loss against updates: one panel per corpus."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    runs = [entry for entry in results if entry.is_best]  # one curve per run
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


def started_from(result: Result):
    """The teacher's run folder where the run starts from the teacher's checkpoint (``init``), else None."""
    if result.init is None or result.teacher is None:
        return None
    return Path(result.teacher.run).resolve()


def scores_against_updates(results) -> dict:
    """{(column, config): {epoch: [(total updates, score) of each seed]}} of the runs evaluated
    after given epochs, a teacher's updates counted where a run starts from its checkpoint (seeds
    of a distilled run can differ in updates an epoch: the teachers' translations differ in
    length); a teacher of such a run adds its final score (epoch None)."""
    runs = {entry.dir.resolve(): entry.result for entry in results}
    series, teachers = {}, set()
    for entry in results:
        if entry.evaluation.epoch is None:  # not an epoch's checkpoint
            continue
        teacher = started_from(entry.result)
        offset = 0
        if teacher is not None:
            if teacher not in runs:
                if not (teacher / "result.json").exists():
                    raise ReportError(
                        f"{entry.result.config}: its teacher's run {entry.result.teacher.run} has no result.json"
                    )
                runs[teacher] = Result.read(teacher / "result.json")
            teachers.add(teacher)
            offset = runs[teacher].training.updates
        point = (offset + entry.evaluation.updates, entry.evaluation.score)
        config = entry.row.partition("@")[0]
        series.setdefault((entry.column, config), {}).setdefault(entry.evaluation.epoch, []).append(point)
    for entry in results:
        if entry.is_best and entry.dir.resolve() in teachers:
            point = (entry.result.training.updates, entry.evaluation.score)
            series.setdefault((entry.column, entry.row), {}).setdefault(None, []).append(point)
    return series


def plot_epochs(series: dict, metric: str, path: Path):
    """The points of ``scores_against_updates``, each epoch's mean over seeds (with the standard
    deviation of its score): one line per config, one panel per corpus."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

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


def collect(root: Path, out: Path, title=None) -> list:
    """Writes OUT.md, OUT.csv, OUT.png, OUT.curves.png (and OUT.epochs.png) from the runs below ``root``;
    returns the rows."""
    results = load_results(root)
    rows = run_rows(results)
    out.parent.mkdir(parents=True, exist_ok=True)
    Path(f"{out}.md").write_text(markdown(title or root.name, rows, results))
    with open(f"{out}.csv", "w", newline="") as f:
        fields = [k for k in rows[0] if not k.endswith("_cell")]
        writer = csv.DictWriter(f, fieldnames=fields, extrasaction="ignore")
        writer.writeheader()
        writer.writerows(
            {
                **r,
                "train_commands": " ; ".join(r["train_commands"]),
                "evaluate_commands": " ; ".join(r["evaluate_commands"]),
            }
            for r in rows
        )
    plot_scores(rows, Path(f"{out}.png"))
    plot_curves(results, Path(f"{out}.curves.png"))
    series = scores_against_updates(results)
    if series:
        plot_epochs(series, rows[0]["metric"], Path(f"{out}.epochs.png"))
    else:  # an earlier collect's plot into the same OUT would describe other runs
        Path(f"{out}.epochs.png").unlink(missing_ok=True)
    return rows
