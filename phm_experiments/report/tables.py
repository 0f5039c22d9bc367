"""The report's tables, made from its rows: OUT.md (Markdown, the paper's layout) and OUT.csv."""

import csv
import dataclasses
from pathlib import Path

from .aggregate import Entry, Row, row_order
from .trace import FOOTNOTE, MARK, UNKNOWN


def model_cell(row: Row) -> str:
    """The row's name, marked where a seed's record cannot be traced to its code."""
    return f"{row.row} {MARK}" if row.untraced else row.row


def trace_notes(rows: list[Row], entries: list[Entry], left_out: list[str]) -> list[str]:
    """What the mark means, where a row has it; where the records' commits could not be checked; the runs
    that --traced-only left out."""
    notes = [FOOTNOTE] if any(r.untraced for r in rows) else []
    unchecked = sorted({e.trace.why for e in entries if e.trace.state == UNKNOWN})
    if unchecked:
        notes.append(f"Whether the runs' code can be traced is not known: {'; '.join(unchecked)}.")
    if left_out:
        notes.append(f"Left out (--traced-only), their code not traced: {', '.join(left_out)}.")
    return ["", *notes] if notes else []


def score_cell(row: Row) -> str:
    return f"{row.score} ± {row.score_std}" if row.score_std is not None else str(row.score)


def chrf_cell(row: Row) -> str:
    if row.chrf is None:
        return ""
    return f"{row.chrf} ± {row.chrf_std}" if row.chrf_std else str(row.chrf)


def params_cell(row: Row) -> str:
    """Parameters without embeddings, their change against the dense model, the counted module's."""
    text = f"{row.params_no_emb:,} ({row.params_change:+.1f}%)"
    return f"{text}; {row.module_params}" if row.module_params else text


def _cell(value, paper=None):
    text = "" if value is None else f"{value:,}" if isinstance(value, int) else str(value)
    return f"{text} ({paper})" if paper is not None else text


def pivot(rows: list[Row], cell, paper=None) -> list[str]:
    """Models (rows) against corpora (columns): ``cell(row)`` each, the paper's figure ``paper(row)`` beside it."""
    columns = sorted({r.column for r in rows})
    names = sorted({r.row for r in rows}, key=row_order)
    cells = {
        (r.row, r.column): _cell(cell(r), paper(r) if paper else None) + (f" {MARK}" if r.untraced else "")
        for r in rows
    }
    lines = ["| model | " + " | ".join(columns) + " |", "|---|" + "---|" * len(columns)]
    lines += [f"| {name} | " + " | ".join(cells.get((name, c), "") for c in columns) + " |" for name in names]
    return lines


# the table of every configuration: a Row's field, or a cell made from the row
RUN_COLUMNS = [
    ("column", "corpus"),
    (model_cell, "model"),
    ("params", "params"),
    ("params_no_emb", "w/o emb."),
    ("params_change", "vs dense %"),
    ("module_params", "counted module"),
    (score_cell, "score"),
    ("train_words_per_s", "train words/s"),
    ("train_speed_vs_dense", "vs dense"),
    ("s_per_100_updates", "s/100 updates"),
    ("train_load", "load"),
    ("eval_examples_per_s", "eval examples/s"),
    ("eval_speed_vs_dense", "vs dense"),
    ("inference_seconds", "eval s"),
    ("eval_load", "load"),
    ("updates", "updates"),
    ("seeds", "seeds"),
    ("threads", "threads"),
    ("cpu_kernels", "CPU kernels"),
]


def run_cell(row: Row, key) -> str:
    return _cell(key(row) if callable(key) else getattr(row, key))


def markdown(title: str, rows: list[Row], entries: list[Entry], left_out=()) -> str:
    """OUT.md: the rows as the paper's tables, then every configuration with its commands; the
    versions and the machine from the first run's environment (of ``entries``); ``left_out``: the runs
    that --traced-only left out."""
    metric = rows[0].metric
    has_paper = any(r.paper_score is not None for r in rows)
    several_seeds = any(r.score_std is not None for r in rows)
    lines = [
        f"# {title}",
        "",
        f"{metric}"
        + (", mean ± standard deviation over seeds" if several_seeds else "")
        + (" (the paper's figure in parentheses)" if has_paper else "")
        + ":",
        "",
    ]
    lines += pivot(rows, score_cell, lambda r: r.paper_score)
    lines += trace_notes(rows, entries, list(left_out))
    lines += [
        "",
        "Parameters without embeddings (change against the dense model of the same corpus, %)"
        + (" and of the counted module" if any(r.module_params for r in rows) else "")
        + (" (the paper's figure in parentheses)" if any(r.paper_params for r in rows) else "")
        + ":",
        "",
    ]
    lines += pivot(rows, params_cell, lambda r: r.paper_params)
    if any(r.paper_s_per_100_updates or r.paper_inference_seconds for r in rows):
        lines += [
            "",
            "Speed (the paper's figure in parentheses, measured on other hardware):",
            "",
            "| model | corpus | s / 100 updates | inference s |",
            "|---|---|---|---|",
        ]
        lines += [
            f"| {model_cell(r)} | {r.column} | {_cell(r.s_per_100_updates, r.paper_s_per_100_updates)} | "
            f"{_cell(r.inference_seconds, r.paper_inference_seconds)} |"
            for r in rows
        ]
    if any(r.last_epochs for r in rows):
        lines += [
            "",
            "Where training stopped, each seed's (fairseq's --patience on the validation score of "
            "--best-checkpoint-metric; `early` yes: patience ended it, no: the --max-epoch or --max-update cap):",
            "",
            "| model | corpus | score | chrF | best validation score | best epoch | last epoch | early | "
            "updates (mean) | wall hours |",
            "|---|---|---|---|---|---|---|---|---|---|",
        ]
        lines += [
            f"| {model_cell(r)} | {r.column} | {score_cell(r)} | {chrf_cell(r)} | {_cell(r.best_valid)} | "
            f"{_cell(r.best_epochs)} | {_cell(r.last_epochs)} | {_cell(r.stopped_early)} | {r.updates:,} | "
            f"{_cell(r.train_hours)} |"
            for r in rows
            if r.last_epochs and "@" not in r.row
        ]
    lines += [
        "",
        "Every configuration (`vs dense`: the speed over the dense model's, given only where both ran on one CPU "
        "with the same kernels at one thread count, each with the machine to itself: its `load`, the machine's "
        "1-minute load average while it trained or evaluated, below its threads + 1):",
        "",
        "| " + " | ".join(label for _, label in RUN_COLUMNS) + " |",
        "|" + "---|" * len(RUN_COLUMNS),
    ]
    lines += ["| " + " | ".join(run_cell(r, key) for key, _ in RUN_COLUMNS) + " |" for r in rows]
    env = entries[0].result.environment
    devices = sorted({entry.result.environment.device for entry in entries})
    threads = by_run({entry.result.environment.threads for entry in entries}, "threads")
    kernels = by_run({entry.result.environment.cpu_capability or "not recorded" for entry in entries}, "CPU kernels")
    lines += [
        "",
        f"Measured with phm-fairseq {env.phm_fairseq} @ {env.git_commit}, torch {env.torch}, "
        f"fairseq {env.fairseq}, Python {env.python} on {' / '.join(devices)} (torch threads: {threads}; "
        f"torch CPU kernels: {kernels}), {env.date[:10]}. The commands of each run:",
        "",
    ]
    for r in rows:
        lines.append(f"- {r.column}/{r.row}:")
        lines += [f"  `{command}`" for pair in zip(r.train_commands, r.evaluate_commands) for command in pair]
    return "\n".join(lines) + "\n"


def by_run(values: set, column: str) -> str:
    """The footer's values of one environment field, "a / b"; where they differ, it points to the
    table's column that gives each run's."""
    shown = " / ".join(map(str, sorted(values)))
    return f"{shown}, by run: the {column} column" if len(values) > 1 else shown


def write_csv(rows: list[Row], path: Path) -> None:
    """OUT.csv: one line per row, every field of it (a row's commands joined by " ; ")."""
    with open(path, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=[field.name for field in dataclasses.fields(Row)])
        writer.writeheader()
        writer.writerows(
            {
                **dataclasses.asdict(r),
                "train_commands": " ; ".join(r.train_commands),
                "evaluate_commands": " ; ".join(r.evaluate_commands),
            }
            for r in rows
        )
