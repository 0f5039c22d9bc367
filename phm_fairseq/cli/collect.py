"""phm-collect: finished runs (phm-run's result.json files) as the paper's tables, with plots.

    phm-collect work/runs/table2 --out work/reports/table2

reads every result.json below the folder; a run's place in it names the row and the column:
work/runs/table2/iwslt14_de_en/phm_n4/seed1 is row phm_n4, column iwslt14_de_en (a folder with
the configs' runs directly in it has one column). Runs of several seeds make one row: the mean
score, its standard deviation and the seeds. Writes
    OUT.md    the paper's layout: the score of every model (rows) on every corpus (columns), the
              paper's figure beside it where the config gives one; parameters without embeddings
              and their change against the dense model of the same corpus; then every run with
              its parameters, speeds, seed and exact commands
    OUT.csv   one line per run, every figure
    OUT.png   score against parameters without embeddings
    OUT.curves.png   learning curves (training and validation loss against updates) from the
              runs' fairseq logs
"""

import argparse
import csv
import json
import re
import statistics
from pathlib import Path

from .run import fairseq_log_stats


def load_results(root: Path) -> list:
    results = []
    for file in sorted(root.rglob("result.json")):
        result = json.loads(file.read_text())
        config_dir = file.parent.parent.relative_to(root)  # .../<config>/seed<S>/result.json
        result["row"] = config_dir.name
        result["column"] = str(config_dir.parent) if str(config_dir.parent) != "." else root.name
        result["dir"] = file.parent
        results.append(result)
    if not results:
        raise SystemExit(f"phm-collect: no result.json under {root} (run `phm-run` first)")
    return results


def mean(values):
    values = [v for v in values if v is not None]
    return sum(values) / len(values) if values else None


def is_dense(result) -> bool:
    return result["parameters"]["dense_total"] == result["parameters"]["total"]


def row_order(name: str):
    """Dense first, then quaternion, then PHM by n: the paper's order."""
    number = re.search(r"(\d+)$", name)
    return ("quaternion" in name, "phm" in name, int(number.group(1)) if number else 0, name)


def ratio(value, reference):
    return round(value / reference, 3) if value and reference else None


def run_rows(results) -> list:
    """One row per config: its seeds' runs averaged."""
    groups = {}
    for r in results:
        groups.setdefault((r["column"], r["row"]), []).append(r)
    dense = {column: mean_of(runs) for (column, _), runs in groups.items() if is_dense(runs[0])}
    rows = []
    for (column, name), runs in groups.items():
        row = mean_of(runs)
        reference = dense.get(column)
        dense_no_emb = reference["params_no_emb"] if reference else row["dense_params_no_emb"]
        row.update({
            "column": column,
            "row": name,
            "params_change": round(100 * (row["params_no_emb"] / dense_no_emb - 1), 1),
            "train_speed_vs_dense": ratio(row["train_words_per_s"], reference and reference["train_words_per_s"]),
            "eval_speed_vs_dense": ratio(row["eval_examples_per_s"], reference and reference["eval_examples_per_s"]),
        })
        rows.append(row)
    return sorted(rows, key=lambda row: (row["column"], row_order(row["row"])))


def mean_of(runs) -> dict:
    """The figures of one config, averaged over its seeds' runs."""
    first, paper = runs[0], runs[0].get("paper") or {}
    scores = [r["evaluation"]["score"] for r in runs]
    module = first["parameters"].get("module")
    evaluation = [r["evaluation"] for r in runs]
    inference = mean(e.get("seconds") or (e["examples"] / e["examples_per_second"] if e.get("examples_per_second") else None)
                     for e in evaluation)
    return {
        "arch": first.get("arch"),
        "metric": first["evaluation"]["metric"],
        "score": round(mean(scores), 2),
        "score_std": round(statistics.stdev(scores), 2) if len(scores) > 1 else None,
        "seeds": " ".join(str(r["seed"]) for r in runs),
        "paper_score": paper.get(first["evaluation"]["metric"]),
        "params": first["parameters"]["total"],
        "params_no_emb": first["parameters"]["without_embeddings"],
        "dense_params_no_emb": first["parameters"]["dense_without_embeddings"],
        "module_params": f"{module['name']}: {module['total']:,}" if module else None,
        "paper_params": paper.get("parameters"),
        "train_words_per_s": round(mean(r["training"]["words_per_second"] for r in runs) or 0),
        "s_per_100_updates": round(mean(r["training"]["seconds_per_100_updates"] for r in runs) or 0, 2),
        "paper_s_per_100_updates": paper.get("seconds_per_100_updates"),
        "eval_examples_per_s": round(mean(e.get("examples_per_second") for e in evaluation) or 0, 1),
        "inference_seconds": round(inference, 1) if inference else None,
        "paper_inference_seconds": paper.get("inference_seconds"),
        "updates": int(mean(r["training"]["updates"] for r in runs)),
        "train_commands": [r["training"]["command"] for r in runs],
        "evaluate_commands": [r["evaluation"]["command"] for r in runs],
    }


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
    ("column", "corpus"), ("row", "model"), ("params", "params"), ("params_no_emb", "w/o emb."),
    ("params_change", "vs dense %"), ("module_params", "counted module"), ("score_cell", "score"),
    ("train_words_per_s", "train words/s"), ("train_speed_vs_dense", "vs dense"),
    ("s_per_100_updates", "s/100 updates"), ("eval_examples_per_s", "eval examples/s"),
    ("eval_speed_vs_dense", "vs dense"), ("inference_seconds", "eval s"), ("updates", "updates"),
    ("seeds", "seeds"),
]


def markdown(title, rows, results) -> str:
    metric = rows[0]["metric"]
    for r in rows:
        r["score_cell"] = f"{r['score']} ± {r['score_std']}" if r["score_std"] is not None else str(r["score"])
        r["params_cell"] = f"{r['params_no_emb']:,} ({r['params_change']:+.1f}%)"
        if r["module_params"]:
            r["params_cell"] += f"; {r['module_params']}"
    has_paper = any(r["paper_score"] is not None for r in rows)
    several_seeds = any(r["score_std"] is not None for r in rows)
    lines = [f"# {title}", "", f"{metric}" + (", mean ± standard deviation over seeds" if several_seeds else "")
             + (" (the paper's figure in parentheses)" if has_paper else "") + ":", ""]
    lines += pivot(rows, "score_cell", "paper_score")
    lines += ["", "Parameters without embeddings (change against the dense model of the same corpus, %)"
              + (" and of the counted module" if any(r["module_params"] for r in rows) else "")
              + (" (the paper's figure in parentheses)" if any(r["paper_params"] for r in rows) else "") + ":", ""]
    lines += pivot(rows, "params_cell", "paper_params")
    if any(r["paper_s_per_100_updates"] or r["paper_inference_seconds"] for r in rows):
        lines += ["", "Speed (the paper's figure in parentheses, measured on other hardware):", "",
                  "| model | corpus | s / 100 updates | inference s |", "|---|---|---|---|"]
        lines += [f"| {r['row']} | {r['column']} | {_cell(r['s_per_100_updates'], r['paper_s_per_100_updates'])} | "
                  f"{_cell(r['inference_seconds'], r['paper_inference_seconds'])} |" for r in rows]
    lines += ["", "Every configuration:", "", "| " + " | ".join(label for _, label in RUN_COLUMNS) + " |",
              "|" + "---|" * len(RUN_COLUMNS)]
    lines += ["| " + " | ".join(_cell(r[key]) for key, _ in RUN_COLUMNS) + " |" for r in rows]
    env = results[0]["environment"]
    lines += [
        "", f"Measured with phm-fairseq {env['phm_fairseq']} @ {env['git_commit']}, torch {env['torch']}, "
        f"fairseq {env['fairseq']}, Python {env['python']} on {env['device']} (torch threads: {env['threads']}), "
        f"{env['date'][:10]}. The commands of each run:", "",
    ]
    for r in rows:
        lines.append(f"- {r['column']}/{r['row']}:")
        lines += [f"  `{command}`" for pair in zip(r["train_commands"], r["evaluate_commands"]) for command in pair]
    return "\n".join(lines) + "\n"


def plot_scores(rows, path: Path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.5, 4.2))
    for column in sorted({r["column"] for r in rows}):
        sel = sorted((r for r in rows if r["column"] == column), key=lambda r: r["params_no_emb"])
        ax.plot([r["params_no_emb"] for r in sel], [r["score"] for r in sel], "o-", label=column)
        for r in sel:
            ax.annotate(r["row"], (r["params_no_emb"], r["score"]), textcoords="offset points", xytext=(4, 4), fontsize=7)
    ax.set_xscale("log")
    ax.set_xlabel("parameters without embeddings")
    ax.set_ylabel(rows[0]["metric"])
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def learning_curve(log: str):
    """(updates, training loss) and (updates, validation loss) from a fairseq-train log."""
    train = [(e["num_updates"], e["loss"]) for e in fairseq_log_stats(log, "train_inner") if "num_updates" in e]
    valid = [(e["num_updates"], e["loss"]) for e in fairseq_log_stats(log, "valid") if "num_updates" in e]
    return train, valid


def plot_curves(results, path: Path):
    """Training (lines) and validation (dots) loss against updates: one panel per corpus."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    columns = sorted({r["column"] for r in results})
    fig, axes = plt.subplots(1, len(columns), figsize=(5.5 * len(columns), 4), squeeze=False)
    for ax, column in zip(axes[0], columns):
        for i, r in enumerate(sorted((r for r in results if r["column"] == column), key=lambda r: row_order(r["row"]))):
            log = (r["dir"] / "train.log").read_text() if (r["dir"] / "train.log").exists() else ""
            train, valid = learning_curve(log)
            if train:
                ax.plot(*zip(*train), color=f"C{i}", lw=1, label=f"{r['row']} train")
            if valid:
                ax.plot(*zip(*valid), "o--", color=f"C{i}", ms=3, lw=1, label=f"{r['row']} valid")
        ax.set_title(column)
        ax.set_xlabel("updates")
        ax.set_ylabel("loss (fairseq's, base 2)")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=6, ncol=2)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def collect(root: Path, out: Path, title=None) -> list:
    results = load_results(root)
    rows = run_rows(results)
    out.parent.mkdir(parents=True, exist_ok=True)
    Path(f"{out}.md").write_text(markdown(title or root.name, rows, results))
    with open(f"{out}.csv", "w", newline="") as f:
        fields = [k for k in rows[0] if not k.endswith("_cell")]
        writer = csv.DictWriter(f, fieldnames=fields, extrasaction="ignore")
        writer.writeheader()
        writer.writerows({**r, "train_commands": " ; ".join(r["train_commands"]),
                          "evaluate_commands": " ; ".join(r["evaluate_commands"])} for r in rows)
    plot_scores(rows, Path(f"{out}.png"))
    plot_curves(results, Path(f"{out}.curves.png"))
    return rows


def main(argv=None):
    parser = argparse.ArgumentParser(prog="phm-collect", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("runs", type=Path, help="a folder of runs (searched for result.json)")
    parser.add_argument("--out", type=Path, required=True, help="output path without suffix")
    parser.add_argument("--title", help="the table's title (default: the folder's name)")
    args = parser.parse_args(argv)
    collect(args.runs, args.out, args.title)
    print(Path(f"{args.out}.md").read_text())
    print(f"wrote {args.out}.md, .csv, .png, .curves.png")


if __name__ == "__main__":
    main()
