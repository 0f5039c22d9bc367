"""The benchmarks part: benchmarks.bench_linear and benchmarks.bench_translation at each size on the device,
each run its share of what is left; their reports go to artifacts.tar as benchmarks/results/gpu/."""

import json
import shutil
from pathlib import Path

from . import clock
from .clock import TimedOut
from .context import Context


def run(ctx: Context, deadline: float) -> dict:
    out = ctx.work / "benchmarks"
    shutil.rmtree(out, ignore_errors=True)
    runs = [("linear", ["benchmarks.bench_linear", *ctx.mode.bench_linear])]
    data = ["--data", ctx.data]
    runs += [(f"translation {size}", ["benchmarks.bench_translation", *ctx.mode.bench_translation, *data,
                                     "--size", size]) for size in ctx.mode.bench_sizes]  # fmt: skip
    failed = []
    for i, (name, command) in enumerate(runs):
        try:
            command = [ctx.python, "-m", *command, "--out", out]
            code = ctx.processes.run(command, ctx.log("benchmarks"), clock.share(deadline, len(runs) - i))
        except TimedOut:
            code = "timed out"
        if code:
            failed.append(f"{name} ({code if code == 'timed out' else f'exit code {code}'})")
        for path in sorted(out.glob("*")) if out.exists() else []:
            ctx.artifact(path, f"benchmarks/results/gpu/{path.name}")
        ctx.report.update("benchmarks", reports=reports(out))
    details = {"reports": reports(out)}
    if failed:
        details.update(status="failed", error=f"did not finish: {', '.join(failed)}")
    return details


def reports(folder: Path) -> dict:
    """The benchmarks' JSON reports in ``folder``: each one's environment and rows."""
    found = {}
    for path in sorted(folder.glob("*.json")) if folder.exists() else []:
        try:
            report = json.loads(path.read_text())
        except ValueError:
            continue
        found[path.stem] = {"environment": report.get("environment"), "rows": report.get("rows")}
    return found
