"""The GPU run (scripts/gpu/run.sh calls it): one command that makes the most of a GPU lent for minutes.

Parts, in this order, each with its own time cap, none losing what another finished:
  install     the wheels of scripts/gpu/wheels.txt that the machine's Python cannot import, into WORK/site
              (pip --no-index --no-deps --target), then `import fairseq, phm_fairseq` and the versions;
  data        Multi30k en-de from data/multi30k by data-prep/multi30k.sh (beside cuda_tests);
  cuda_tests  pytest -m cuda tests/test_gpu_cuda.py (PHMLinear, QuaternionLinear, HypercomplexLSTM, models);
  training    fairseq-train of the dense twin, PHM n=4 and the quaternion model in fp32, --fp16, --amp,
              --memory-efficient-fp16 and bfloat16 --amp (scripts/gpu/training.py), fairseq-generate --fp16;
  benchmarks  benchmarks.bench_linear and benchmarks.bench_translation on the device;
  quality     phm-run of configs/gpu (Multi30k at the paper's sizes, converged recipe) side by side, each
              capped in time by fairseq's --stop-time-hours, scored with sacrebleu on test2016.
OUT receives report.json and report.md (rewritten after every step), one log per part, and
artifacts.tar (benchmark reports, the quality runs' records and logs, as paths of this repository).
"""

import argparse
import dataclasses
import datetime
import importlib.util
import json
import math
import os
import platform
import re
import shlex
import shutil
import signal
import subprocess
import sys
import tarfile
import threading
import time
import xml.etree.ElementTree as ElementTree
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent
PARTS = ("install", "data", "cuda_tests", "training", "benchmarks", "quality")
LOGS = {"install": "setup.log", "data": "setup.log"}  # the other parts log to <part>.log


@dataclasses.dataclass(frozen=True)
class Mode:
    """Sizes and time caps of a run: on the GPU, or the CPU dry run that keeps this script working."""

    name: str
    budget_s: float  # wall time of the whole run, from run.sh's start
    caps: dict  # part -> its cap in seconds (quality: what is left, less quality_reserve_s)
    training_updates: dict  # size -> updates of each training at it, in this order
    tiny: bool  # the dry run's tiny models and data
    bench_linear: list
    bench_translation: list  # argv of each run, without --size
    bench_sizes: tuple
    quality_configs: tuple  # configs/gpu/<folder>/<name>.yaml, run side by side
    quality_reserve_s: float  # after the time cap: phm-run's start, the last validation, averaging, two evaluations
    quality_threads: int


GPU = Mode(
    name="gpu",
    budget_s=470,
    caps={"install": 90, "data": 90, "cuda_tests": 90, "training": 170, "benchmarks": 80},
    training_updates={"demo": 200, "base": 150},
    tiny=False,
    bench_linear=["--device", "cuda", "--dtype", "float16", "bfloat16", "--tokens", "4096", "16384", "65536"]
    + ["--rounds", "3", "--min-run-time", "0.02"],
    bench_translation=["--device", "cuda", "--rounds", "3", "--sentences", "64", "--min-run-time", "0.05"]
    + ["--models", "dense twin", "PHM n=2", "PHM n=4", "PHM n=8", "quaternion"],
    bench_sizes=("iwslt", "base"),
    quality_configs=tuple(
        f"{size}/{name}"
        for size in ("multi30k_iwslt", "multi30k_base")
        for name in ("transformer", "phm_n4", "phm_n2", "transformer_equal_params")
    ),
    quality_reserve_s=150,  # eight evaluations side by side overran 90 s on the H200
    quality_threads=2,
)
# the dry run's caps only stop a part that hangs: on a loaded machine its parts take several times longer
DRY_RUN = Mode(
    name="cpu-dry-run",
    budget_s=3000,
    caps={"install": 600, "data": 600, "cuda_tests": 600, "training": 600, "benchmarks": 600},
    training_updates={"demo": 8},
    tiny=True,
    bench_linear=["--device", "cpu", "--dtype", "float32", "bfloat16", "--tokens", "64", "--ns", "2", "4"]
    + ["--rounds", "1", "--min-run-time", "0.01", "--no-memory"],
    bench_translation=["--device", "cpu", "--rounds", "1", "--sentences", "4", "--length", "4", "--max-tokens", "512"]
    + ["--train-batches", "1", "--min-run-time", "0.01", "--no-memory", "--models", "dense twin", "PHM n=4"],
    bench_sizes=("demo",),
    quality_configs=("multi30k_iwslt/phm_n4",),
    quality_reserve_s=60,
    quality_threads=1,
)
# the dry run's tiny models (tests/conftest.py's TINY) and data (a slice of the bundled Multi30k)
TINY_TRAIN = {
    **{f"{side}-{key}": value for side in ("encoder", "decoder") for key, value in (("layers", 1), ("embed-dim", 32))},
    **{f"{side}-ffn-embed-dim": 64 for side in ("encoder", "decoder")},
    **{f"{side}-attention-heads": 2 for side in ("encoder", "decoder")},
    "max-tokens": 1024,
    "num-workers": 0,
    "max-epoch": 2,
    "patience": None,
}
SLICE = {"train": 1000, "val": 50, "test_2016_flickr": 50}
MIN_PART_SECONDS = 5  # a part with less time than this left in the run's budget is skipped
STOPPED = "the command was stopped (SIGTERM or Ctrl-C): its processes too"


class TimedOut(Exception):
    pass


class Skipped(Exception):
    pass


@dataclasses.dataclass
class Report:
    """report.json and report.md in OUT, rewritten (atomically) after every step."""

    out: Path
    mode: str
    data: dict = dataclasses.field(default_factory=dict)
    lock: threading.Lock = dataclasses.field(default_factory=threading.Lock)

    def update(self, part: str = None, **values) -> None:
        with self.lock:
            target = self.data if part is None else self.data["parts"].setdefault(part, {})
            target.update(values)
            self.data["updated"] = now()
            self.data["elapsed_s"] = round(time.time() - self.data["start_time"], 1)
            write_atomically(self.out / "report.json", json.dumps(self.data, indent=2) + "\n")
            write_atomically(self.out / "report.md", markdown(self.data))


def now() -> str:
    return datetime.datetime.now().isoformat(timespec="seconds")


def write_atomically(path: Path, text: str) -> None:
    partial = path.with_name(f".{path.name}.partial")
    partial.write_text(text, encoding="utf-8")
    os.replace(partial, path)


class Run:
    """One run of the parts: the mode, the interpreter, where things go, the report."""

    def __init__(self, mode: Mode, python: str, out: Path, work: Path, wheels: Path, started: float, parts, command):
        self.mode, self.python, self.out, self.work, self.wheels = mode, python, out, work, wheels
        self.deadline = started + mode.budget_s
        self.parts = parts
        self.site = work / "site"  # the installed wheels (GPU)
        self.data = work / "data-bin" / "multi30k.en-de"
        self.children = set()  # running process groups, stopped on exit
        self.children_lock = threading.Lock()
        self.stopping = False  # stop_all() was called: no process starts, a part that ends is "stopped"
        self.report = Report(out, mode.name)
        self.report.data.update(
            issue=41,
            mode=mode.name,
            started=datetime.datetime.fromtimestamp(started).isoformat(timespec="seconds"),
            start_time=started,
            budget_s=mode.budget_s,
            command=command,
            machine=machine(),
            parts={name: {"status": "pending" if name in parts else "not asked"} for name in PARTS},
        )
        self.report.update()
        paths = [str(REPO)] if mode.name != "gpu" else [str(self.site), str(REPO)]
        self.env = {
            **os.environ,
            "PYTHONPATH": os.pathsep.join(paths + [p for p in [os.environ.get("PYTHONPATH")] if p]),
            "PATH": os.pathsep.join([str(self.site / "bin"), str(Path(python).parent), os.environ.get("PATH", "")]),
            "PYTHON": python,  # data-prep's helpers
            "PYTHONUNBUFFERED": "1",
            "MPLBACKEND": "Agg",
        }

    # --- processes ------------------------------------------------------------------------------

    def start(self, command: list, log: Path, env=None) -> subprocess.Popen:
        with open(log, "a", encoding="utf-8") as file, self.children_lock:
            if self.stopping:
                raise RuntimeError(STOPPED)
            file.write(f"\n[{now()}] $ {shlex.join(map(str, command))}\n")
            file.flush()
            process = subprocess.Popen(
                [str(c) for c in command], cwd=REPO, env=env or self.env, stdout=file, stderr=subprocess.STDOUT,
                start_new_session=True,
            )  # fmt: skip
            self.children.add(process)
        return process

    def wait(self, process: subprocess.Popen, deadline: float, poll=None) -> int:
        """The exit code of ``process``; at ``deadline`` it is stopped and TimedOut raised. ``poll``
        runs every few seconds meanwhile (to report what it has finished so far)."""
        try:
            while True:
                try:
                    return process.wait(timeout=max(0.1, min(5.0, deadline - time.time())))
                except subprocess.TimeoutExpired:
                    if poll:
                        poll()
                    if time.time() >= deadline:
                        stop(process)
                        raise TimedOut from None
        finally:
            if poll:
                poll()
            if process.returncode is not None:  # not when SIGTERM or Ctrl-C ends the wait: stop_all() stops it
                self.children.discard(process)

    def run(self, command: list, log: Path, deadline: float, env=None, poll=None) -> int:
        return self.wait(self.start(command, log, env), deadline, poll)

    def stop_all(self) -> None:
        with self.children_lock:
            self.stopping = True
            processes = list(self.children)
        for process in processes:
            stop(process)

    def log(self, part: str) -> Path:
        return self.out / LOGS.get(part, f"{part}.log")

    def artifact(self, path: Path, name: str) -> None:
        """Adds ``path`` to OUT/artifacts.tar as ``name`` (a path of this repository)."""
        with self.report.lock, tarfile.open(self.out / "artifacts.tar", "a") as tar:
            tar.add(path, arcname=name)

    # --- parts ----------------------------------------------------------------------------------

    def part(self, name: str, cap: float, body, needs=()) -> bool:
        """Runs ``body(deadline)`` as part ``name``: within ``cap`` seconds and the run's budget, its
        status, time and what it returned in the report whatever happens. True if it succeeded."""
        if name not in self.parts:
            return False
        failed = [n for n in needs if self.report.data["parts"][n]["status"] not in ("ok", "not asked")]
        if failed:
            self.report.update(name, status="skipped", error=f"needs {', '.join(failed)}, which did not succeed")
            return False
        start = time.time()
        deadline = min(start + cap, self.deadline)
        self.report.update(name, status="running", cap_s=round(deadline - start), log=self.log(name).name)
        try:
            if deadline - start < MIN_PART_SECONDS:
                raise Skipped("no time left in the run's budget")
            status, details = "ok", body(deadline)
            details = details or {}
            status = details.pop("status", status)
            error = details.pop("error", None)
        except TimedOut:
            status, error, details = "timed out", f"stopped at its cap of {round(deadline - start)} s", {}
        except Skipped as why:
            status, error, details = "skipped", str(why), {}
        except Exception as error_:  # a part's failure is reported; the next part runs
            status, error, details = "failed", f"{type(error_).__name__}: {error_}", {}
        if self.stopping:  # data or cuda_tests, beside the main thread that SIGTERM or Ctrl-C ended
            status, error = "stopped", STOPPED
        self.report.update(name, status=status, error=error, seconds=round(time.time() - start, 1), **details)
        return status == "ok"

    def install(self, deadline: float) -> dict:
        entries = read_wheel_list()
        missing = [e for e in entries if e["module"] != "pip" and importlib.util.find_spec(e["module"]) is None]
        details = {"wheels_listed": len(entries), "missing_here": [e["requirement"] for e in missing]}
        self.report.update("install", **details)
        if self.mode.name != "gpu":
            if missing:
                raise RuntimeError(
                    f"{', '.join(e['module'] for e in missing)}: not importable by {self.python}, "
                    "though scripts/gpu/wheels.txt lists them: run `make install`, or correct wheels.txt"
                )
        elif missing:
            details["installed"] = self.install_wheels(missing, deadline)
        check = "import json, sys, torch, fairseq, phm_fairseq, numpy, sacrebleu; " + VERSIONS
        if self.run([self.python, "-c", check], self.log("install"), deadline):
            raise RuntimeError(f"import fairseq, phm_fairseq failed: {last_line(self.log('install'))}")
        versions = json.loads(last_line(self.log("install")))
        self.report.update(versions=versions)
        details["versions"] = versions
        if self.mode.name == "gpu" and not versions["cuda_available"]:
            details.update(status="failed", error="torch sees no GPU: the CUDA parts cannot run")
        return details

    def install_wheels(self, missing: list, deadline: float) -> list:
        files = []
        for entry in missing:
            found = sorted(self.wheels.glob(f"{wheel_name(entry['name'])}-{entry['version']}-*.whl"))
            if not found:
                raise RuntimeError(
                    f"{entry['requirement']}: the machine lacks {entry['module']} and {self.wheels} has no wheel of it "
                    "(run scripts/gpu/wheels.sh here, and carry scripts/gpu/wheels to the GPU)"
                )
            files.append(found[-1])
        names = sorted(f.name for f in files)
        marker = self.site / ".installed.json"
        if marker.exists() and json.loads(marker.read_text()) == names:
            return names  # a warm machine, installed by an earlier run
        shutil.rmtree(self.site, ignore_errors=True)
        if importlib.util.find_spec("pip") is not None:
            pip = [self.python, "-m", "pip"]
        else:  # pip runs from its own wheel
            wheel = sorted(self.wheels.glob("pip-*.whl"))
            if not wheel:
                raise RuntimeError(f"{self.python} has no pip, and {self.wheels} no pip wheel to run it from")
            pip = [self.python, str(wheel[-1] / "pip")]
        command = [*pip, "install", "--no-index", "--no-deps", "--disable-pip-version-check"]
        command += ["--no-warn-script-location", "--target", str(self.site), *map(str, files)]
        if self.run(command, self.log("install"), deadline):
            raise RuntimeError(f"pip install failed (see {self.log('install').name})")
        marker.write_text(json.dumps(names))
        return names

    def prepare_data(self, deadline: float) -> dict:
        source, extra = REPO / "data" / "multi30k", []
        if self.mode.tiny:
            source, extra = self.work / "multi30k-slice", ["--bpe-size", "1000", "--workers", "1"]
            slice_multi30k(source)
        command = ["bash", "data-prep/multi30k.sh", "--src-dir", source, "--out", self.data, *extra]
        if self.run(command, self.log("data"), deadline):
            raise RuntimeError(f"data-prep/multi30k.sh failed (see {self.log('data').name})")
        prep = json.loads((self.data / "prep.json").read_text())
        return {"data": str(self.data.relative_to(REPO) if self.data.is_relative_to(REPO) else self.data),
                "seconds_to_prepare": prep.get("seconds"), "splits": prep.get("splits")}  # fmt: skip

    def cuda_tests(self, deadline: float) -> dict:
        junit = self.work / "cuda_tests.xml"
        junit.unlink(missing_ok=True)
        env = {**self.env, **({"PHM_CUDA_TESTS_ON_CPU": "1"} if self.mode.name != "gpu" else {})}
        command = [self.python, "-m", "pytest", "-q", "-m", "cuda", "tests/test_gpu_cuda.py", "-p", "no:cacheprovider"]
        code = self.run([*command, "--junitxml", junit], self.log("cuda_tests"), deadline, env=env)
        results = junit_results(junit)
        bad = results["failed"] or results["errors"] or not results["passed"] or (code and code != 0)
        if self.mode.name == "gpu" and results["skipped"]:
            bad = True
        status = "failed" if bad else "ok"
        return {**results, "exit_code": code, "status": status}

    def training(self, deadline: float) -> dict:
        results = self.work / "training.jsonl"
        results.unlink(missing_ok=True)
        script = [self.python, HERE / "training.py", "--data", self.data, "--work", self.work / "training"]
        script += ["--results", results, "--deadline", str(deadline)] + (["--tiny"] if self.mode.tiny else [])

        def poll():
            self.report.update("training", **training_summary(read_jsonl(results)))

        codes = []
        for i, (size, updates) in enumerate(self.mode.training_updates.items()):
            command = [*script, "--size", size, "--updates", str(updates)] + (["--bf16-check"] if i == 0 else [])
            codes.append(self.run(command, self.log("training"), deadline, poll=poll))
        summary = training_summary(read_jsonl(results))
        rows = summary["runs"] + summary["generation"]
        expected_skips = {"skipped"} if self.mode.name != "gpu" else set()
        bad = any(code != 0 for code in codes) or any(r["status"] not in {"ok", *expected_skips} for r in rows)
        return {**summary, "status": "failed" if bad else "ok"}

    def benchmarks(self, deadline: float) -> dict:
        out = self.work / "benchmarks"
        shutil.rmtree(out, ignore_errors=True)
        runs = [("linear", ["benchmarks.bench_linear", *self.mode.bench_linear])]
        data = ["--data", self.data]
        runs += [(f"translation {size}", ["benchmarks.bench_translation", *self.mode.bench_translation, *data,
                                         "--size", size]) for size in self.mode.bench_sizes]  # fmt: skip
        failed = []
        for i, (name, command) in enumerate(runs):
            # each run its share of what is left, so that one that overruns leaves the others their time
            share = (deadline - time.time()) / (len(runs) - i)
            try:
                code = self.run(
                    [self.python, "-m", *command, "--out", out], self.log("benchmarks"), time.time() + share
                )
            except TimedOut:
                code = "timed out"
            if code:
                failed.append(f"{name} ({code if code == 'timed out' else f'exit code {code}'})")
            for path in sorted(out.glob("*")) if out.exists() else []:
                self.artifact(path, f"benchmarks/results/gpu/{path.name}")
            self.report.update("benchmarks", reports=benchmark_rows(out))
        details = {"reports": benchmark_rows(out)}
        if failed:
            details.update(status="failed", error=f"did not finish: {', '.join(failed)}")
        return details

    def quality(self, deadline: float) -> dict:
        training_s = deadline - time.time() - self.mode.quality_reserve_s
        if not self.mode.tiny and training_s < 60:
            raise Skipped(f"{round(training_s)} s left for training: too little to say anything")
        runs_dir, logs = self.work / "runs", self.work / "quality-logs"
        shutil.rmtree(runs_dir, ignore_errors=True)
        logs.mkdir(parents=True, exist_ok=True)
        env = {**self.env, "OMP_NUM_THREADS": str(self.mode.quality_threads)}
        jobs = {}  # config name -> (process, config path, log)
        for name in self.mode.quality_configs:
            config = self.quality_config(name, training_s)
            log = logs / f"{name.replace('/', '.')}.log"
            log.unlink(missing_ok=True)
            jobs[name] = (self.start(quality_command(self.python, config, runs_dir), log, env), config, log)

        def poll():
            self.report.update("quality", runs=quality_rows(self.mode.quality_configs, runs_dir))

        codes = {}
        pending = dict(jobs)
        while pending:
            for name, (process, config, log) in list(pending.items()):
                if process.poll() is None:
                    continue
                self.children.discard(process)
                del pending[name]
                codes[name] = process.returncode
                folder = run_folder(runs_dir, name)
                # fewer epochs than evaluate.average_last in the time cap: evaluate again with those there are
                epochs = sum(bool(re.fullmatch(r"checkpoint\d+\.pt", p.name)) for p in folder.glob("checkpoints/*.pt"))
                if process.returncode and "average_last" in log.read_text() and epochs and time.time() < deadline - 45:
                    config = self.quality_config(name, training_s, average_last=epochs)
                    pending[name] = (self.start(quality_command(self.python, config, runs_dir), log, env), config, log)
            if time.time() >= deadline:
                for process, _, _ in pending.values():
                    stop(process)
                    self.children.discard(process)
                codes.update({name: "timed out" for name in pending})
                break
            poll()
            time.sleep(2)
        rows = quality_rows(self.mode.quality_configs, runs_dir)
        for name in self.mode.quality_configs:
            folder = run_folder(runs_dir, name)
            for file in ("result.json", "train.log", "evaluate.log"):
                if (folder / file).exists():
                    self.artifact(folder / file, f"results/runs/gpu/{name}/seed1/{file}")
            log = logs / f"{name.replace('/', '.')}.log"
            with open(self.log("quality"), "a", encoding="utf-8") as out:
                out.write(f"\n===== {name} (exit code {codes.get(name)})\n{log.read_text() if log.exists() else ''}")
        failed = [f"{name} ({code})" for name, code in codes.items() if code != 0]
        details = {"runs": rows, "training_cap_s": None if self.mode.tiny else round(training_s)}
        if failed:
            details.update(status="failed", error=f"did not finish: {', '.join(failed)}")
        return details

    def quality_config(self, name: str, training_s: float, average_last: int = None) -> Path:
        """WORK/configs/gpu/NAME.yaml: configs/gpu/NAME.yaml on this run's data, capped at ``training_s``
        of training (the dry run: its tiny sizes for 2 epochs), as phm-run reads it (JSON is YAML)."""
        train = {"stop-time-hours": round(training_s / 3600, 5)}
        if self.mode.tiny:
            train = {**TINY_TRAIN, "stop-time-hours": None}
        config = {
            "extends": str(REPO / "configs" / "gpu" / f"{name}.yaml"),
            "data": str(self.data),
            "prepare": f"bash data-prep/multi30k.sh --src-dir data/multi30k --out {self.data}",
            "train": train,
        }
        if self.mode.tiny or average_last:
            config["evaluate"] = {"average_last": average_last or 2}
        path = self.work / "configs" / "gpu" / f"{name}.yaml"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(config, indent=2) + "\n")
        return path


VERSIONS = """
cuda = torch.cuda.is_available()
print(json.dumps({
    "python": sys.version.split()[0], "torch": torch.__version__, "cuda": torch.version.cuda,
    "cudnn": torch.backends.cudnn.version() if cuda else None, "cuda_available": cuda,
    "device": torch.cuda.get_device_name() if cuda else None,
    "capability": ".".join(map(str, torch.cuda.get_device_capability())) if cuda else None,
    "bf16_supported": torch.cuda.is_bf16_supported() if cuda else None,
    "fairseq": fairseq.__version__, "phm_fairseq": phm_fairseq.__version__, "numpy": numpy.__version__,
    "sacrebleu": sacrebleu.__version__, "fairseq_from": fairseq.__file__,
}))
"""


def stop(process: subprocess.Popen) -> None:
    """Stops a process and everything it started (its own session): SIGTERM, SIGKILL 10 s later."""
    for sig, grace in ((signal.SIGTERM, 10), (signal.SIGKILL, 5)):
        if process.poll() is not None:
            return
        try:
            os.killpg(process.pid, sig)
        except ProcessLookupError:
            return
        try:
            process.wait(grace)
        except subprocess.TimeoutExpired:
            pass


def machine() -> dict:
    """What the report says of the machine, read without torch (which may not be installed yet)."""
    info = {"host_python": platform.python_version(), "cpu_cores": os.cpu_count(), "platform": platform.platform()}
    try:
        info["cpu"] = next(
            line.split(":", 1)[1].strip()
            for line in Path("/proc/cpuinfo").read_text().splitlines()
            if line.startswith("model name")
        )
    except (OSError, StopIteration):
        info["cpu"] = platform.processor()
    if shutil.which("nvidia-smi"):
        query = "--query-gpu=name,driver_version,memory.total,compute_cap"
        smi = subprocess.run(["nvidia-smi", query, "--format=csv,noheader"], capture_output=True, text=True)
        info["nvidia_smi"] = smi.stdout.strip() or smi.stderr.strip()
    try:
        git = ["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"]
        info["git_commit"] = subprocess.run(git, capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        info["git_commit"] = os.environ.get("PHM_GIT_COMMIT", "unknown (no .git in this copy)")
    return info


def read_wheel_list() -> list:
    """scripts/gpu/wheels.txt: each requirement with its module and how wheels.sh gets it."""
    entries = []
    for line in (HERE / "wheels.txt").read_text().splitlines():
        fields = line.split()
        if not fields or fields[0].startswith("#"):
            continue
        requirement, module, how = fields
        name, version = requirement.split("==")
        entries.append({"requirement": requirement, "name": name, "version": version, "module": module, "how": how})
    return entries


def wheel_name(distribution: str) -> str:
    """A distribution's name as wheel files spell it (PEP 427: runs of - _ . become _)."""
    return re.sub(r"[-_.]+", "_", distribution).lower()


def last_line(log: Path) -> str:
    return log.read_text(encoding="utf-8").rstrip("\n").rsplit("\n", 1)[-1]


def slice_multi30k(folder: Path) -> None:
    """The first lines of the bundled Multi30k en-de (gzip files as in data/multi30k), for the dry run."""
    import gzip

    folder.mkdir(parents=True, exist_ok=True)
    for name, count in SLICE.items():
        for lang in ("en", "de"):
            with gzip.open(REPO / "data" / "multi30k" / f"{name}.{lang}.gz", "rt", encoding="utf-8") as source:
                lines = [next(source) for _ in range(count)]
            with gzip.open(folder / f"{name}.{lang}.gz", "wt", encoding="utf-8") as target:
                target.writelines(lines)


def junit_results(path: Path) -> dict:
    if not path.exists():
        return {"passed": 0, "failed": 0, "errors": 0, "skipped": 0, "failures": ["no test report written"]}
    root = ElementTree.parse(path).getroot()
    suite = root if root.tag == "testsuite" else root.find("testsuite")
    counts = {key: int(suite.get(key, 0)) for key in ("tests", "failures", "errors", "skipped")}
    failures = []
    for case in suite.iter("testcase"):
        for problem in (*case.findall("failure"), *case.findall("error")):
            message = (problem.get("message") or "").split("\n")[0][:300]
            failures.append(f"{case.get('name')}: {message}")
    return {
        "passed": counts["tests"] - counts["failures"] - counts["errors"] - counts["skipped"],
        "failed": counts["failures"],
        "errors": counts["errors"],
        "skipped": counts["skipped"],
        "failures": failures,
    }


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


def training_summary(records: list) -> dict:
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


def benchmark_rows(folder: Path) -> dict:
    reports = {}
    for path in sorted(folder.glob("*.json")) if folder.exists() else []:
        try:
            report = json.loads(path.read_text())
        except ValueError:
            continue
        reports[path.stem] = {"environment": report.get("environment"), "rows": report.get("rows")}
    return reports


def quality_command(python: str, config: Path, runs_dir: Path) -> list:
    return [python, "-m", "phm_experiments.cli.run", config, "--runs-dir", runs_dir]


def run_folder(runs_dir: Path, name: str) -> Path:
    return runs_dir / "gpu" / name / "seed1"


def quality_rows(names, runs_dir: Path) -> list:
    rows = []
    for name in names:
        folder = run_folder(runs_dir, name)
        row = {"config": f"configs/gpu/{name}.yaml", "status": "running"}
        if (folder / "result.json").exists():
            result = json.loads((folder / "result.json").read_text())
            training, evaluation = result["training"], result["evaluation"]
            averaged = result.get("averaged_evaluation") or {}
            row.update(
                status="done",
                arch=result["arch"],
                parameters=result["parameters"]["total"],
                without_embeddings=result["parameters"]["without_embeddings"],
                bleu=evaluation["score"],
                chrf=evaluation.get("chrf"),
                averaged_bleu=averaged.get("score"),
                averaged_chrf=averaged.get("chrf"),
                averaged_epochs=len(averaged.get("averaged") or []) or None,
                best_valid=training.get("best_valid"),
                best_epoch=training.get("best_epoch"),
                epochs=training.get("last_epoch"),
                updates=training.get("updates"),
                stopped_early=training.get("stopped_early"),
                words_per_second=training.get("words_per_second"),
                train_seconds=training.get("train_seconds"),
            )
        elif (folder / "train.log").exists():
            epochs = re.findall(r'"epoch": (\d+), "valid_loss"', (folder / "train.log").read_text(errors="replace"))
            row["epochs_validated"] = len(epochs)
        rows.append(row)
    return rows


# --- report.md ---------------------------------------------------------------------------------


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


def markdown(data: dict) -> str:
    machine_, versions = data["machine"], data.get("versions") or {}
    lines = [
        f"# GPU run ({data['mode']}): issue 41",
        "",
        f"`{data['command']}`, started {data['started']}, {data['elapsed_s']} s of its {data['budget_s']} s "
        f"(updated {data['updated']}).",
        "",
        f"Machine: {machine_.get('nvidia_smi') or 'no nvidia-smi'}; CPU {machine_.get('cpu')} "
        f"({machine_.get('cpu_cores')} cores); commit {machine_.get('git_commit')}.",
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
    parts = data["parts"]
    tests = parts["cuda_tests"]
    if "passed" in tests:
        lines += ["", "## CUDA tests", "", f"{tests['passed']} passed, {tests['failed']} failed, "
                  f"{tests['errors']} errors, {tests['skipped']} skipped."]  # fmt: skip
        lines += [f"- {failure}" for failure in tests.get("failures", [])]
    training = parts["training"]
    if training.get("runs") is not None:
        lines += ["", "## Training (fairseq-train; words/s after the first quarter of the updates)", ""]
        lines += table(
            training["runs"],
            [
                ("size", "size"), ("model", "model"), ("precision", "precision"), ("status", "status"),
                ("updates", "updates"), ("first_loss", "first loss"), ("last_loss", "last loss"),
                ("words_per_second", "words/s"), ("speed_vs_dense", "vs dense"), ("peak_mib", "peak MiB"),
                ("memory_vs_dense", "vs dense"), ("overflows", "overflows"), ("seconds", "s"), ("error", "error"),
            ],
        )  # fmt: skip
        lines += ["fairseq-generate --fp16 (test2016, beam 5) of each fp32 run's checkpoint:", ""]
        lines += table(
            training.get("generation", []),
            [("size", "size"), ("model", "model"), ("status", "status"), ("sentences", "sentences"),
             ("bleu", "BLEU"), ("sentences_per_second", "sentences/s"), ("peak_mib", "peak MiB"), ("error", "error")],
        )  # fmt: skip
        for warm_up in training.get("warm_up", []):
            curve = ", ".join(f"{w / 1000:.0f}k" for w in warm_up.get("words_per_second_curve") or [] if w)
            what = f"{warm_up['model']}, {warm_up['precision']}"
            lines += [f"Untimed warm-up before the {warm_up['size']} runs ({what}), words/s every tenth of its "
                      f"updates: {curve or warm_up.get('error')}.", ""]  # fmt: skip
        bf16 = training.get("fairseq_bf16")
        if bf16:
            lines += [f"fairseq's own --bf16: {'fails: ' + str(bf16['error']) if bf16['fails'] else 'trains'}.", ""]
    for name, report in (parts["benchmarks"].get("reports") or {}).items():
        rows = report.get("rows") or []
        lines += ["", f"## Benchmark {name}", ""]
        if rows:
            keys = [k for k in rows[0] if not isinstance(rows[0][k], (list, dict))]
            lines += table(rows, [(k, k) for k in keys])
    quality = parts["quality"]
    if quality.get("runs"):
        cap = quality.get("training_cap_s")
        length = f"training capped at {cap} s" if cap else "the dry run's tiny models, 2 epochs"
        lines += ["", f"## Quality (Multi30k test2016; {length})", ""]
        lines += table(
            quality["runs"],
            [
                ("config", "config"), ("status", "status"), ("without_embeddings", "params w/o emb."),
                ("bleu", "BLEU"), ("chrf", "chrF"), ("averaged_bleu", "BLEU, last epochs averaged"),
                ("averaged_epochs", "averaged"), ("best_valid", "best valid BLEU"), ("best_epoch", "best epoch"),
                ("epochs", "epochs"), ("updates", "updates"), ("stopped_early", "stopped early"),
                ("words_per_second", "words/s"),
            ],
        )  # fmt: skip
    return "\n".join(lines) + "\n"


def part_cap(text: str) -> tuple:
    """--cap's PART=SECONDS."""
    part, _, seconds = text.partition("=")
    capped = [name for name in PARTS if name != "quality"]
    if part not in capped:
        raise argparse.ArgumentTypeError(f"'{text}': PART is one of {', '.join(capped)} (quality takes what is left)")
    try:
        seconds = float(seconds)
    except ValueError:
        raise argparse.ArgumentTypeError(f"'{text}': SECONDS is a number, e.g. {part}=240") from None
    if not math.isfinite(seconds) or seconds < MIN_PART_SECONDS:
        raise argparse.ArgumentTypeError(
            f"'{text}': SECONDS is a number of at least {MIN_PART_SECONDS} (no part starts with less), e.g. "
            f"{part}=240; to leave the part out, leave it out of --parts"
        )
    return part, seconds


def budget(text: str) -> float:
    """--budget's SECONDS."""
    try:
        seconds = float(text)
    except ValueError:
        seconds = math.nan
    if not math.isfinite(seconds) or seconds <= 0:
        raise argparse.ArgumentTypeError(f"'{text}': the run's time in seconds, a number above 0, e.g. 510")
    return seconds


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--mode", choices=["gpu", "cpu-dry-run"], default="gpu")
    parser.add_argument("--out", type=Path, required=True, help="the report, the logs and artifacts.tar")
    parser.add_argument("--work", type=Path, required=True, help="installed wheels, data, runs (scratch)")
    parser.add_argument("--wheels", type=Path, default=HERE / "wheels")
    parser.add_argument("--python", default=sys.executable, help="the interpreter that runs every part")
    parser.add_argument("--started", type=float, default=time.time(), help="UNIX time the command started")
    parser.add_argument("--parts", nargs="+", choices=PARTS, default=list(PARTS), help="run only these parts")
    parser.add_argument("--command", default="scripts/gpu/run.sh", help="the command as typed, for the report")
    parser.add_argument("--budget", type=budget, help="seconds the whole run may take (default: 470 on the GPU)")
    parser.add_argument("--cap", type=part_cap, action="append", default=[], metavar="PART=SECONDS",
                        help="another time cap for a part, e.g. training=240 (quality takes what is left)")  # fmt: skip
    parser.add_argument("--quality", nargs="+", metavar="FOLDER/NAME", help="the configs/gpu runs of the quality "
                        "part, e.g. multi30k_base/phm_n4 (default: all eight)")  # fmt: skip
    args = parser.parse_args(argv)
    unknown = [name for name in args.quality or [] if not (REPO / "configs" / "gpu" / f"{name}.yaml").is_file()]
    if unknown:
        parser.error(f"--quality: no configs/gpu/{unknown[0]}.yaml (give FOLDER/NAME of a file in configs/gpu)")
    twice = [name for i, name in enumerate(args.quality or []) if name in args.quality[:i]]
    if twice:
        parser.error(f"--quality: {twice[0]} is named twice (each run has one folder): name each run once")
    for variable, flag, folder in (("OUT", "--out", args.out), ("PHM_GPU_WORK", "--work", args.work)):
        if folder.exists() and not folder.is_dir():
            parser.error(
                f"{variable} ({flag}): {folder} is a file, not a folder: name a folder (it is made if missing)"
            )
    return args


def settings(args) -> Mode:
    """The mode's sizes and caps, with the command line's budget, caps and quality runs."""
    mode = GPU if args.mode == "gpu" else DRY_RUN
    return dataclasses.replace(
        mode,
        budget_s=mode.budget_s if args.budget is None else args.budget,
        caps={**mode.caps, **dict(args.cap)},
        quality_configs=tuple(args.quality or mode.quality_configs),
    )


def main():
    args = parse_args()
    mode = settings(args)
    for variable, folder in (("OUT", args.out), ("PHM_GPU_WORK", args.work)):
        try:
            folder.mkdir(parents=True, exist_ok=True)
        except OSError as error:  # a file on its path, no permission
            sys.exit(f"run.py: {variable}: cannot make the folder {folder}: {error.strerror}: name another one")
    (args.out / "artifacts.tar").unlink(missing_ok=True)
    folders = args.out.resolve(), args.work.resolve(), args.wheels.resolve()
    run = Run(mode, args.python, *folders, args.started, args.parts, args.command)
    # the command's own end (a time limit's SIGTERM, Ctrl-C) stops every part's processes, and the parts
    # that were running (or not yet started) are reported "stopped"
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))
    setup = []
    try:
        caps = mode.caps
        run.part("install", caps["install"], run.install)
        setup = [
            threading.Thread(target=run.part, args=("data", caps["data"], run.prepare_data, ["install"])),
            threading.Thread(target=run.part, args=("cuda_tests", caps["cuda_tests"], run.cuda_tests, ["install"])),
        ]
        for thread in setup:
            thread.start()
        for thread in setup:
            thread.join()
        run.part("training", caps["training"], run.training, needs=["install", "data"])
        run.part("benchmarks", caps["benchmarks"], run.benchmarks, needs=["install", "data"])
        run.part("quality", run.deadline - time.time(), run.quality, needs=["install", "data"])
    finally:
        for sig in (signal.SIGINT, signal.SIGTERM):  # a second one would leave processes running
            signal.signal(sig, signal.SIG_IGN)
        run.stop_all()
        for thread in setup:
            if thread.is_alive():
                thread.join()
        for name, part in run.report.data["parts"].items():
            if part["status"] in ("pending", "running"):
                runs = [{**r, "status": "stopped"} if r.get("status") == "running" else r for r in part.get("runs", [])]
                run.report.update(name, status="stopped", error=STOPPED, **({"runs": runs} if runs else {}))
        done = [name for name, p in run.report.data["parts"].items() if p["status"] == "ok"]
        run.report.update(finished=now(), parts_ok=done)
    asked = [name for name in PARTS if name in args.parts]
    return 0 if all(run.report.data["parts"][name]["status"] == "ok" for name in asked) else 1


if __name__ == "__main__":
    sys.exit(main())
