"""What every benchmark shares: timing, the machine's description, JSON + Markdown reports."""

import json
import logging
import os
import statistics
import time
from pathlib import Path

import torch

from phm_fairseq.provenance import environment  # noqa: F401  (re-exported for the benchmarks)

RESULTS = Path(__file__).resolve().parent / "results"

# importing fairseq sets the root logger to DEBUG (its text_to_speech tasks call basicConfig)
logging.getLogger("matplotlib").setLevel(logging.WARNING)


def interleaved_ratio(fn, baseline, iters: int, rounds: int, sync=lambda: None):
    """Times ``fn`` and ``baseline`` in alternating rounds, so that drift of the machine
    (clock, other load) falls on both; returns (median fn s, median baseline s, median ratio)."""
    for f in (fn, baseline, fn, baseline):
        f()
    sync()
    ratios, fn_times, base_times = [], [], []
    for _ in range(rounds):
        pair = []
        for f in (fn, baseline):
            start = time.perf_counter()
            for _ in range(iters):
                f()
            sync()
            pair.append((time.perf_counter() - start) / iters)
        fn_times.append(pair[0])
        base_times.append(pair[1])
        ratios.append(pair[0] / pair[1])
    return statistics.median(fn_times), statistics.median(base_times), statistics.median(ratios)


def write_report(name: str, title: str, env: dict, columns: list, rows: list, notes: str = "") -> Path:
    """results/<name>.json (everything) and results/<name>.md (a table with its provenance)."""
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / f"{name}.json").write_text(json.dumps({"environment": env, "rows": rows}, indent=2) + "\n")
    fmt = lambda v: f"{v:.3f}" if isinstance(v, float) else str(v)  # noqa: E731
    lines = [
        f"# {title}",
        "",
        f"`{env['command']}` on {env['device']} ({env['threads']} threads), {env['date']}; "
        f"Python {env['python']}, torch {env['torch']}, fairseq {env['fairseq']}, "
        f"phm-fairseq {env['phm_fairseq']} @ {env['git_commit']}.",
        "",
        "| " + " | ".join(label for _, label in columns) + " |",
        "|" + "---|" * len(columns),
        *("| " + " | ".join(fmt(row[key]) for key, _ in columns) + " |" for row in rows),
        "",
    ]
    if notes:
        lines += [notes.strip(), ""]
    path = RESULTS / f"{name}.md"
    path.write_text("\n".join(lines))
    return path


def cuda_sync():
    torch.cuda.synchronize()


def default_threads():
    """Benchmarks use every core of the machine unless OMP_NUM_THREADS says otherwise."""
    if "OMP_NUM_THREADS" not in os.environ:
        torch.set_num_threads(os.cpu_count() or 1)
