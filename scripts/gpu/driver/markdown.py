"""report.md: report.json's figures as Markdown, a section per part that has any."""

from .modes import PARTS

TRAINING_COLUMNS = [
    ("size", "size"), ("model", "model"), ("precision", "precision"), ("status", "status"),
    ("updates", "updates"), ("first_loss", "first loss"), ("last_loss", "last loss"),
    ("words_per_second", "words/s"), ("speed_vs_dense", "vs dense"), ("peak_mib", "peak MiB"),
    ("memory_vs_dense", "vs dense"), ("overflows", "overflows"), ("seconds", "s"), ("error", "error"),
]  # fmt: skip
GENERATION_COLUMNS = [
    ("size", "size"), ("model", "model"), ("status", "status"), ("sentences", "sentences"),
    ("bleu", "BLEU"), ("sentences_per_second", "sentences/s"), ("peak_mib", "peak MiB"), ("error", "error"),
]  # fmt: skip
QUALITY_COLUMNS = [
    ("config", "config"), ("status", "status"), ("without_embeddings", "params w/o emb."),
    ("bleu", "BLEU"), ("chrf", "chrF"), ("averaged_bleu", "BLEU, last epochs averaged"),
    ("averaged_epochs", "averaged"), ("best_valid", "best valid BLEU"), ("best_epoch", "best epoch"),
    ("epochs", "epochs"), ("updates", "updates"), ("stopped_early", "stopped early"),
    ("words_per_second", "words/s"),
]  # fmt: skip


def markdown(data: dict) -> str:
    parts = data["parts"]
    sections = [
        header(data),
        cuda_tests(parts["cuda_tests"]),
        training(parts["training"]),
        benchmarks(parts["benchmarks"]),
        quality(parts["quality"]),
    ]
    return "\n".join(line for section in sections for line in section) + "\n"


def table(rows: list, columns: list) -> list:
    if not rows:
        return ["(nothing yet)", ""]
    fmt = lambda v: "" if v is None else f"{v:,.2f}" if isinstance(v, float) else str(v)  # noqa: E731
    return [
        "| " + " | ".join(label for _, label in columns) + " |",
        "|" + "---|" * len(columns),
        *("| " + " | ".join(fmt(row.get(key)) for key, _ in columns) + " |" for row in rows),
        "",
    ]


def header(data: dict) -> list:
    machine, versions = data["machine"], data.get("versions") or {}
    lines = [
        f"# GPU run ({data['mode']}): issue 41",
        "",
        f"`{data['command']}`, started {data['started']}, {data['elapsed_s']} s of its {data['budget_s']} s "
        f"(updated {data['updated']}).",
        "",
        f"Machine: {machine.get('nvidia_smi') or 'no nvidia-smi'}; CPU {machine.get('cpu')} "
        f"({machine.get('cpu_cores')} cores); commit {machine.get('git_commit')}.",
        "Versions: " + (", ".join(f"{k} {v}" for k, v in versions.items() if k != "fairseq_from") or "not yet read"),
        "",
        "| part | status | seconds | cap (s) | log | error |",
        "|---|---|---|---|---|---|",
    ]
    for name in PARTS:
        p = data["parts"][name]
        lines.append(
            f"| {name} | {p['status']} | {p.get('seconds', '')} | {p.get('cap_s', '')} | {p.get('log', '')} | "
            f"{(p.get('error') or '').replace('|', '/')[:300]} |"
        )
    return lines


def cuda_tests(part: dict) -> list:
    if "passed" not in part:
        return []
    lines = ["", "## CUDA tests", "", f"{part['passed']} passed, {part['failed']} failed, "
             f"{part['errors']} errors, {part['skipped']} skipped."]  # fmt: skip
    return lines + [f"- {failure}" for failure in part.get("failures", [])]


def training(part: dict) -> list:
    if part.get("runs") is None:
        return []
    lines = ["", "## Training (fairseq-train; words/s after the first quarter of the updates)", ""]
    lines += table(part["runs"], TRAINING_COLUMNS)
    lines += ["fairseq-generate --fp16 (test2016, beam 5) of each fp32 run's checkpoint:", ""]
    lines += table(part.get("generation", []), GENERATION_COLUMNS)
    for warm_up in part.get("warm_up", []):
        curve = ", ".join(f"{w / 1000:.0f}k" for w in warm_up.get("words_per_second_curve") or [] if w)
        what = f"{warm_up['model']}, {warm_up['precision']}"
        lines += [f"Untimed warm-up before the {warm_up['size']} runs ({what}), words/s every tenth of its "
                  f"updates: {curve or warm_up.get('error')}.", ""]  # fmt: skip
    bf16 = part.get("fairseq_bf16")
    if bf16:
        lines += [f"fairseq's own --bf16: {'fails: ' + str(bf16['error']) if bf16['fails'] else 'trains'}.", ""]
    return lines


def benchmarks(part: dict) -> list:
    lines = []
    for name, report in (part.get("reports") or {}).items():
        rows = report.get("rows") or []
        lines += ["", f"## Benchmark {name}", ""]
        if rows:
            keys = [k for k in rows[0] if not isinstance(rows[0][k], (list, dict))]
            lines += table(rows, [(k, k) for k in keys])
    return lines


def quality(part: dict) -> list:
    if not part.get("runs"):
        return []
    cap = part.get("training_cap_s")
    length = f"training capped at {cap} s" if cap else "the dry run's tiny models, 2 epochs"
    return ["", f"## Quality (Multi30k test2016; {length})", "", *table(part["runs"], QUALITY_COLUMNS)]
