"""What every benchmark shares: timing (torch.utils.benchmark), the machine's description (CPU model and
instruction sets), JSON + Markdown reports."""

import gc
import json
import logging
import os
import re
import shlex
import statistics
import subprocess
import sys
from pathlib import Path
from typing import NamedTuple

import torch
import torch.utils.benchmark as benchmark

from phm_experiments import provenance
from phm_experiments.data import multi30k_sample  # noqa: F401  (the benchmarks' small corpus)

RESULTS = Path(__file__).resolve().parent / "results"
REPO = Path(__file__).resolve().parent.parent

# importing fairseq sets the root logger to DEBUG (its text_to_speech tasks call basicConfig)
logging.getLogger("matplotlib").setLevel(logging.WARNING)


def prepare_multi30k(data: str) -> None:
    """Prepare the bundled Multi30k en-de into ``data`` (offline, a few seconds) unless it is there."""
    if not Path(data, "dict.en.txt").exists():
        script, source = REPO / "data-prep" / "multi30k.sh", REPO / "data" / "multi30k"
        subprocess.run(["bash", str(script), "--src-dir", str(source), "--out", data], check=True)


class Timing(NamedTuple):
    seconds: float  # median seconds a call of the measured function, over the rounds
    baseline_seconds: float
    ratio: float  # median over the rounds of (its time / the baseline's time) in that round
    measurements: list  # torch.utils.benchmark Measurements, both sides, every round (for Compare)


def timed_ratio(fn, baseline, rounds: int, min_run_time: float = 0.2, label: str = "", sub_label: str = "") -> Timing:
    """``fn`` against ``baseline`` with torch.utils.benchmark: each round measures both with
    Timer.blocked_autorange (a first timing run to size the blocks, then blocks of calls for at
    least ``min_run_time`` seconds; CUDA synchronised by the Timer), at this process's thread count,
    in an order that alternates round by round, after a garbage collection, so that neither side
    always runs first or inherits the other's garbage, and drift of the machine falls on both."""
    threads = torch.get_num_threads()
    timers = {
        side: benchmark.Timer(
            stmt="f()", globals={"f": f}, num_threads=threads, label=label, sub_label=sub_label, description=side
        )
        for side, f in (("measured", fn), ("baseline", baseline))
    }
    medians = {"measured": [], "baseline": []}
    measurements = []
    for round_ in range(rounds):
        for side in ("measured", "baseline") if round_ % 2 == 0 else ("baseline", "measured"):
            gc.collect()
            measurement = timers[side].blocked_autorange(min_run_time=min_run_time)
            medians[side].append(measurement.median)
            measurements.append(measurement)
    ratios = [a / b for a, b in zip(medians["measured"], medians["baseline"])]
    return Timing(
        statistics.median(medians["measured"]),
        statistics.median(medians["baseline"]),
        statistics.median(ratios),
        measurements,
    )


def portable(text: str) -> str:
    """``text`` with the repository's paths relative to it: a committed report names no machine's folders."""
    return text.replace(f"{REPO}{os.sep}", "")


def write_report(
    name: str, title: str, env: dict, columns: list, rows: list, notes: str = "", extra=None, directory: Path = RESULTS
) -> Path:
    """<directory>/<name>.json (everything, ``extra`` included) and <name>.md (a table with its provenance);
    ``directory``: results/ unless a trial run writes elsewhere."""
    directory.mkdir(parents=True, exist_ok=True)
    (directory / f"{name}.json").write_text(
        portable(json.dumps({"environment": env, "rows": rows, **(extra or {})}, indent=2) + "\n")
    )
    fmt = lambda v: f"{v:.3f}" if isinstance(v, float) else str(v)  # noqa: E731
    lines = [
        f"# {title}",
        "",
        f"`{env['command']}` on {env['device']} ({machine(env)}; {env['threads']} threads), {env['date']}; "
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
    path.write_text(portable("\n".join(lines)))
    return path


def machine(env: dict) -> str:
    """The CPU's instruction sets as a report names them: torch's capability and the flags."""
    if "cpu_capability" not in env:
        return "instruction sets not recorded"
    return f"torch CPU capability {env['cpu_capability']}, {' '.join(env['instruction_sets']) or 'no AVX'}"


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


# the instruction sets that decide which kernels torch's CPU matmuls and our products run
INSTRUCTION_SETS = ("avx2", "fma", "f16c", "avx512f", "avx512bw", "avx512_vnni", "avx512_bf16", "avx_vnni", "amx_tile")


def instruction_sets() -> list:
    """Which of INSTRUCTION_SETS this CPU has (Linux's /proc/cpuinfo flags; [] elsewhere)."""
    try:
        flags = re.search(r"^flags\s*:(.*)$", Path("/proc/cpuinfo").read_text(), re.MULTILINE)
    except OSError:
        return []
    present = set(flags.group(1).split()) if flags else set()
    return [name for name in INSTRUCTION_SETS if name in present]


def environment(device: str = "cpu") -> dict:
    """The provenance of a report, with the command as one types it (python -m benchmarks.NAME ...),
    the CPU's instruction sets and the kernels torch picked for them (its CPU capability)."""
    spec = getattr(sys.modules["__main__"], "__spec__", None)
    command = shlex.join(["python", "-m", spec.name, *sys.argv[1:]]) if spec is not None else None
    return {
        **provenance.environment(device, command=command),
        "instruction_sets": instruction_sets(),
    }


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
