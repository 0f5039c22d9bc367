"""The quality part: scripts/gpu/quality.py for each configs/gpu run of the mode, side by side, each a
phm-run of one config with its training capped at what is left less the time to evaluate. Each writes its
row of the report as it goes (WORK/quality-rows); at the deadline the runs still going are stopped. Their
records and logs go to artifacts.tar (results/runs/gpu/...), their output to quality.log."""

import json
import shutil
import time
from pathlib import Path

from .clock import Skipped
from .context import Context
from .paths import GPU


def command(ctx: Context, name: str, training_s: float, deadline: float, runs_dir: Path, row: Path) -> list:
    """scripts/gpu/quality.py of configs/gpu/NAME.yaml."""
    command = [ctx.python, GPU / "quality.py", "--config", name, "--data", ctx.data, "--runs-dir", runs_dir]
    command += ["--work", ctx.work, "--training-seconds", str(round(training_s)), "--deadline", str(deadline)]
    return command + ["--row", row] + (["--tiny"] if ctx.mode.tiny else [])


def run(ctx: Context, deadline: float) -> dict:
    training_s = deadline - time.time() - ctx.mode.quality_reserve_s
    if not ctx.mode.tiny and training_s < 60:
        raise Skipped(f"{round(training_s)} s left for training: too little to say anything")
    runs_dir, logs, rows_dir = ctx.work / "runs", ctx.work / "quality-logs", ctx.work / "quality-rows"
    for folder in (runs_dir, rows_dir):
        shutil.rmtree(folder, ignore_errors=True)
    for folder in (logs, rows_dir):
        folder.mkdir(parents=True, exist_ok=True)
    names = ctx.mode.quality_configs
    env = {**ctx.env, "OMP_NUM_THREADS": str(ctx.mode.quality_threads)}
    pending = {}
    for name in names:
        log = logs / f"{name.replace('/', '.')}.log"
        log.unlink(missing_ok=True)
        pending[name] = ctx.processes.start(command(ctx, name, training_s, deadline, runs_dir, row(rows_dir, name)),
                                            log, env)  # fmt: skip
    codes = {}
    while pending:
        for name, process in list(pending.items()):
            if process.poll() is not None:
                ctx.processes.forget(process)
                codes[name] = process.returncode
                del pending[name]
        if time.time() >= deadline:
            for name, process in pending.items():
                ctx.processes.stop(process)
                codes[name] = "timed out"
            break
        ctx.report.update("quality", runs=rows(names, rows_dir))
        time.sleep(2)
    for name in names:
        for archived, path in read_row(rows_dir, name)["files"].items():
            ctx.artifact(Path(path), archived)
        log = logs / f"{name.replace('/', '.')}.log"
        with open(ctx.log("quality"), "a", encoding="utf-8") as out:
            out.write(f"\n===== {name} (exit code {codes.get(name)})\n{log.read_text() if log.exists() else ''}")
    ended = {name: "timed out" if code == "timed out" else "failed" for name, code in codes.items() if code != 0}
    failed = [f"{name} ({code})" for name, code in codes.items() if code != 0]
    details = {"runs": rows(names, rows_dir, ended), "training_cap_s": None if ctx.mode.tiny else round(training_s)}
    if failed:
        details.update(status="failed", error=f"did not finish: {', '.join(failed)}")
    return details


def row(rows_dir: Path, name: str) -> Path:
    return rows_dir / f"{name.replace('/', '.')}.json"


def read_row(rows_dir: Path, name: str) -> dict:
    """What scripts/gpu/quality.py wrote of run ``name``: its row and its files; before it wrote: running."""
    try:
        return json.loads(row(rows_dir, name).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {"row": {"config": f"configs/gpu/{name}.yaml", "status": "running"}, "files": {}}


def rows(names, rows_dir: Path, ended=None) -> list:
    """The runs' rows; a run that ``ended`` (name -> how) with its row still running says how it ended."""
    ended = ended or {}
    found = {name: read_row(rows_dir, name)["row"] for name in names}
    return [
        {**found[name], "status": ended[name]} if found[name]["status"] == "running" and name in ended else found[name]
        for name in names
    ]
