"""phm-collect: finished runs (phm-run's result.json files) as one table, a CSV and a plot.

    phm-collect work/runs/demo --out work/reports/demo

writes work/reports/demo.md, .csv and .png (score against parameters without embeddings).
Rows compare with the dense run of the same folder when there is one (its arch names the
dense twin, transformer_twin_* / lstm_nli); otherwise with the dense count of the same model.
"""

import argparse
import csv
import json
from pathlib import Path

COLUMNS = [
    ("run", "run"),
    ("arch", "arch"),
    ("params", "params"),
    ("params_no_emb", "params w/o emb."),
    ("params_change", "w/o emb. vs dense"),
    ("score", "score"),
    ("paper", "paper"),
    ("train_speed", "train words/s"),
    ("train_speed_ratio", "vs dense"),
    ("s_per_100_updates", "s / 100 updates"),
    ("eval_speed", "eval examples/s"),
    ("eval_speed_ratio", "vs dense"),
    ("seed", "seed"),
]


def load_results(paths) -> list:
    results = []
    for path in map(Path, paths):
        files = sorted(path.rglob("result.json")) if path.is_dir() else [path]
        for file in files:
            result = json.loads(file.read_text())
            result["run"] = str(file.parent.relative_to(path) if path.is_dir() else file.parent.name)
            results.append(result)
    if not results:
        raise SystemExit(f"phm-collect: no result.json under {', '.join(map(str, paths))}")
    return results


def is_dense(result) -> bool:
    return result["parameters"]["dense_total"] == result["parameters"]["total"]


def ratio(value, reference):
    return round(value / reference, 3) if value and reference else None


def rows_of(results) -> list:
    dense = next((r for r in results if is_dense(r)), None)
    rows = []
    for r in results:
        params, training, evaluation = r["parameters"], r["training"], r["evaluation"]
        dense_no_emb = dense["parameters"]["without_embeddings"] if dense else params["dense_without_embeddings"]
        rows.append({
            "run": r["run"],
            "arch": r.get("arch"),
            "params": params["total"],
            "params_no_emb": params["without_embeddings"],
            "params_change": f"{100 * (params['without_embeddings'] / dense_no_emb - 1):+.1f}%",
            "metric": evaluation["metric"],
            "score": evaluation["score"],
            "paper": (r.get("paper") or {}).get(evaluation["metric"]),
            "train_speed": round(training["words_per_second"] or 0),
            "train_speed_ratio": ratio(training["words_per_second"], dense and dense["training"]["words_per_second"]),
            "s_per_100_updates": round(training["seconds_per_100_updates"] or 0, 1),
            "eval_speed": evaluation.get("examples_per_second"),
            "eval_speed_ratio": ratio(evaluation.get("examples_per_second"),
                                      dense and dense["evaluation"].get("examples_per_second")),
            "seed": r["seed"],
            "train_command": training["command"],
            "evaluate_command": evaluation["command"],
        })
    return rows


def markdown(rows, results) -> str:
    metric = rows[0]["metric"]
    header = [label if key != "score" else metric for key, label in COLUMNS]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(COLUMNS)]
    for row in rows:
        lines.append("| " + " | ".join("" if row[key] is None else f"{row[key]:,}" if isinstance(row[key], int)
                                      else str(row[key]) for key, _ in COLUMNS) + " |")
    env = results[0]["environment"]
    lines += [
        "",
        f"Measured with phm-fairseq {env['phm_fairseq']} @ {env['git_commit']}, torch {env['torch']}, "
        f"fairseq {env['fairseq']}, Python {env['python']} on {env['device']} ({env['threads']} threads), "
        f"{env['date'][:10]}. Commands of each run:",
        "",
    ]
    for row in rows:
        lines += [f"- {row['run']}:", f"  `{row['train_command']}`", f"  `{row['evaluate_command']}`"]
    return "\n".join(lines) + "\n"


def plot(rows, path: Path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4))
    for row in rows:
        ax.scatter(row["params_no_emb"], row["score"], s=40)
        ax.annotate(row["run"].split("/")[-1], (row["params_no_emb"], row["score"]),
                    textcoords="offset points", xytext=(5, 4), fontsize=8)
    ax.set_xscale("log")
    ax.set_xlabel("parameters without embeddings")
    ax.set_ylabel(rows[0]["metric"])
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def collect(paths, out: Path) -> list:
    results = load_results(paths)
    rows = rows_of(results)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.with_suffix(".md").write_text(markdown(rows, results))
    with open(out.with_suffix(".csv"), "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    plot(rows, out.with_suffix(".png"))
    return rows


def main(argv=None):
    parser = argparse.ArgumentParser(prog="phm-collect", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("runs", nargs="+", help="run folders (searched for result.json) or result.json files")
    parser.add_argument("--out", type=Path, required=True, help="output path without suffix")
    args = parser.parse_args(argv)
    collect(args.runs, args.out)
    print(args.out.with_suffix(".md").read_text())
    print(f"wrote {args.out.with_suffix('.md')}, .csv, .png")


if __name__ == "__main__":
    main()
