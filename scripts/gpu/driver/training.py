"""The training part: scripts/gpu/training.py at each size of the mode (fairseq-train in every precision,
fairseq-generate --fp16), read from the JSON lines it appends as it goes and set against the dense twin."""

import json
from pathlib import Path

from .context import Context
from .paths import GPU


def run(ctx: Context, deadline: float) -> dict:
    results = ctx.work / "training.jsonl"
    results.unlink(missing_ok=True)
    script = [ctx.python, GPU / "training.py", "--data", ctx.data, "--work", ctx.work / "training"]
    script += ["--results", results, "--deadline", str(deadline)] + (["--tiny"] if ctx.mode.tiny else [])

    def poll():
        ctx.report.update("training", **summary(read_jsonl(results)))

    codes = []
    for i, (size, updates) in enumerate(ctx.mode.training_updates.items()):
        command = [*script, "--size", size, "--updates", str(updates)] + (["--bf16-check"] if i == 0 else [])
        codes.append(ctx.processes.run(command, ctx.log("training"), deadline, poll=poll))
    figures = summary(read_jsonl(results))
    rows = figures["runs"] + figures["generation"]
    expected = {"ok"} if ctx.mode.gpu else {"ok", "skipped"}  # the CPU skips --fp16
    bad = any(code != 0 for code in codes) or any(r["status"] not in expected for r in rows)
    return {**figures, "status": "failed" if bad else "ok"}


def read_jsonl(path: Path) -> list:
    if not path.exists():
        return []
    records = []
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            records.append(json.loads(line))
        except ValueError:  # a line being written
            pass
    return records


def summary(records: list) -> dict:
    """The training part's rows, each set against the dense twin of its size and precision."""
    runs = [dict(r) for r in records if r["kind"] == "train"]
    dense = {(r["size"], r["precision"]): r for r in runs if r["model"] == "dense twin" and r.get("status") == "ok"}
    for row in runs:
        twin = dense.get((row["size"], row["precision"]))
        for key, ratio in (("words_per_second", "speed_vs_dense"), ("peak_mib", "memory_vs_dense")):
            ok = twin and row.get(key) and twin.get(key)
            row[ratio] = round(row[key] / twin[key], 3) if ok else None
        row.pop("loss_curve", None)
    bf16 = [r for r in records if r["kind"] == "bf16-check"]
    return {
        "warm_up": [r for r in records if r["kind"] == "warm-up"],
        "runs": runs,
        "generation": [r for r in records if r["kind"] == "generate"],
        "fairseq_bf16": bf16[0] if bf16 else None,
        "loss_curves": {f"{r['size']} {r['model']} {r['precision']}": r.get("loss_curve") for r in records
                        if r["kind"] == "train" and r.get("loss_curve")},
    }  # fmt: skip
