"""What every benchmark shares: timing, the machine's description, JSON + Markdown reports."""

import json
import logging
import os
import shlex
import statistics
import subprocess
import sys
import time
from pathlib import Path

import torch

from phm_experiments import provenance

RESULTS = Path(__file__).resolve().parent / "results"
REPO = Path(__file__).resolve().parent.parent

# importing fairseq sets the root logger to DEBUG (its text_to_speech tasks call basicConfig)
logging.getLogger("matplotlib").setLevel(logging.WARNING)


def prepare_multi30k(data: str) -> None:
    """Prepare the bundled Multi30k en-de into ``data`` (offline, a few seconds) unless it is there."""
    if not Path(data, "dict.en.txt").exists():
        script, source = REPO / "data-prep" / "multi30k.sh", REPO / "data" / "multi30k"
        subprocess.run(["bash", str(script), "--src-dir", str(source), "--out", data], check=True)


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


def write_report(
    name: str, title: str, env: dict, columns: list, rows: list, notes: str = "", extra=None, directory: Path = RESULTS
) -> Path:
    """<directory>/<name>.json (everything, ``extra`` included) and <name>.md (a table with its provenance);
    ``directory``: results/ unless a trial run writes elsewhere."""
    directory.mkdir(parents=True, exist_ok=True)
    (directory / f"{name}.json").write_text(
        json.dumps({"environment": env, "rows": rows, **(extra or {})}, indent=2) + "\n"
    )
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
    path = directory / f"{name}.md"
    path.write_text("\n".join(lines))
    return path


def peak_rss_during(fn) -> int:
    """Bytes of resident memory that ``fn`` adds at its peak (Linux): VmHWM belongs to this
    process's own address space, and writing 5 to clear_refs resets it to the current size.
    Run it in a fresh process (``fresh_process``), where no earlier peak or allocator cache hides it."""
    Path("/proc/self/clear_refs").write_text("5")
    base = _proc_status_bytes("VmRSS")
    fn()
    return _proc_status_bytes("VmHWM") - base


def _proc_status_bytes(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) * 1024
    raise RuntimeError(f"{field} not in /proc/self/status: peak memory needs Linux")


def environment(device: str = "cpu") -> dict:
    """The provenance of a report, with the command as one types it: python -m benchmarks.NAME ..."""
    spec = getattr(sys.modules["__main__"], "__spec__", None)
    command = shlex.join(["python", "-m", spec.name, *sys.argv[1:]]) if spec is not None else None
    return provenance.environment(device, command=command)


def fresh_process(module: str, *args) -> str:
    """The last line that ``python -m module args...`` prints (run from the repository root)."""
    out = subprocess.run([sys.executable, "-m", module, *map(str, args)], capture_output=True, text=True, cwd=REPO)
    if out.returncode:
        raise RuntimeError(f"{module} {' '.join(map(str, args))} failed:\n{out.stderr[-3000:]}")
    return out.stdout.strip().splitlines()[-1]


def cuda_sync():
    torch.cuda.synchronize()


def default_threads():
    """Benchmarks use every core of the machine unless OMP_NUM_THREADS says otherwise."""
    if "OMP_NUM_THREADS" not in os.environ:
        torch.set_num_threads(os.cpu_count() or 1)
