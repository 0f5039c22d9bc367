"""The run's plan: install; data beside cuda_tests; training; benchmarks; quality in what is left. Each
part runs within its cap and the run's budget, with its status, time and figures in the report whatever
happens; the parts that the command's end cut off, or had not started, are reported stopped."""

import threading
import time

from . import benchmarks, clock, cuda_tests, data, install, quality, training
from .clock import Skipped, TimedOut
from .context import Context
from .modes import NEEDS, PARTS
from .processes import STOPPED, stopped_at_the_end
from .report import now

# each part's body: (context, deadline) -> its figures for the report (with "status" and "error" to say
# it failed without raising)
BODIES = {
    "install": install.run,
    "data": data.run,
    "cuda_tests": cuda_tests.run,
    "training": training.run,
    "benchmarks": benchmarks.run,
    "quality": quality.run,
}


def run_all(ctx: Context) -> int:
    """Every asked part in order; 0 if each succeeded, else 1."""
    setup = []
    try:
        with stopped_at_the_end(ctx.processes):  # signals ignored and every process stopped, then:
            caps = ctx.mode.caps
            part(ctx, "install", caps["install"])
            setup = [
                threading.Thread(target=part, args=(ctx, name, caps[name]), kwargs={"needs": NEEDS[name]})
                for name in ("data", "cuda_tests")
            ]
            for thread in setup:
                thread.start()
            for thread in setup:
                thread.join()
            part(ctx, "training", caps["training"], needs=NEEDS["training"])
            part(ctx, "benchmarks", caps["benchmarks"], needs=NEEDS["benchmarks"])
            part(ctx, "quality", ctx.budget.left(), needs=NEEDS["quality"])
    finally:
        for thread in setup:
            if thread.is_alive():
                thread.join()
        finish(ctx)
    asked = [name for name in PARTS if name in ctx.parts]
    return 0 if all(ctx.report.status(name) == "ok" for name in asked) else 1


def part(ctx: Context, name: str, cap: float, body=None, needs=()) -> bool:
    """Runs ``body(ctx, deadline)`` (the part's own by default) as part ``name``: within ``cap`` seconds and
    the run's budget, its status, time and what it returned in the report whatever happens. True if it
    succeeded."""
    if name not in ctx.parts:
        return False
    body = body or BODIES[name]
    failed = [n for n in needs if ctx.report.status(n) not in ("ok", "not asked")]
    if failed:
        ctx.report.update(name, status="skipped", error=f"needs {', '.join(failed)}, which did not succeed")
        return False
    start = time.time()
    deadline = ctx.budget.part_deadline(start, cap)
    ctx.report.update(name, status="running", cap_s=round(deadline - start), log=ctx.log(name).name)
    try:
        if deadline - start < clock.MIN_PART_SECONDS:
            raise Skipped("no time left in the run's budget")
        details = dict(body(ctx, deadline) or {})
        status = details.pop("status", "ok")
        error = details.pop("error", None)
    except TimedOut:
        status, error, details = "timed out", f"stopped at its cap of {round(deadline - start)} s", {}
    except Skipped as why:
        status, error, details = "skipped", str(why), {}
    except Exception as error_:  # a part's failure is reported; the next part runs
        status, error, details = "failed", f"{type(error_).__name__}: {error_}", {}
    if ctx.processes.stopping:  # data or cuda_tests, beside the main thread that SIGTERM or Ctrl-C ended
        status, error = "stopped", STOPPED
    ctx.report.update(name, status=status, error=error, seconds=round(time.time() - start, 1), **details)
    return status == "ok"


def finish(ctx: Context) -> None:
    """The parts still pending or running are reported stopped (and their running rows); the run finished."""
    for name, reported in ctx.report.data["parts"].items():
        if reported["status"] in ("pending", "running"):
            runs = [{**r, "status": "stopped"} if r.get("status") == "running" else r for r in reported.get("runs", [])]
            ctx.report.update(name, status="stopped", error=STOPPED, **({"runs": runs} if runs else {}))
    done = [name for name, reported in ctx.report.data["parts"].items() if reported["status"] == "ok"]
    ctx.report.update(finished=now(), parts_ok=done)
