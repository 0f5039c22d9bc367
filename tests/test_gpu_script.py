"""The GPU run (scripts/gpu) without a GPU: its CPU dry run end to end, the pieces a GPU machine relies on
(the wheel list, an offline install, time caps), and the bfloat16 launcher."""

import importlib.util
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tarfile
import time
import zipfile
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

REPO = Path(__file__).resolve().parent.parent
GPU = REPO / "scripts" / "gpu"
sys.path.insert(0, str(GPU))  # the driver package, as run.py finds it beside itself

from driver import cli, clock, install, modes, plan, quality, training  # noqa: E402
from driver.context import Context  # noqa: E402


def context(tmp_path, mode=modes.DRY_RUN, wheels=None) -> Context:
    return Context.create(mode, sys.executable, tmp_path, tmp_path / "work", wheels or tmp_path, time.time(),
                          modes.PARTS, "test")  # fmt: skip


def load_script(name: str):
    """scripts/gpu/NAME.py, a program the driver starts, as a module."""
    spec = importlib.util.spec_from_file_location(f"gpu_{name}", GPU / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.slow
@pytest.mark.gpu_plan
def test_the_cpu_dry_run_runs_every_part_and_reports_it(tmp_path):
    out, work = tmp_path / "out", tmp_path / "work"
    env = {**os.environ, "OUT": str(out), "PHM_GPU_WORK": str(work), "OMP_NUM_THREADS": "1"}
    before = sorted(os.listdir(REPO))
    result = subprocess.run(
        ["bash", str(GPU / "run.sh"), "--cpu-dry-run"], env=env, capture_output=True, text=True, timeout=3000
    )
    assert sorted(os.listdir(REPO)) == before, "the run writes below OUT and PHM_GPU_WORK only"
    report = json.loads((out / "report.json").read_text())
    statuses = {name: part["status"] for name, part in report["parts"].items()}
    assert result.returncode == 0 and set(statuses.values()) == {"ok"}, (statuses, (out / "report.md").read_text())
    files = {"report.json", "report.md", "setup.log", "cuda_tests.log", "training.log", "benchmarks.log"}
    assert {p.name for p in out.iterdir()} == files | {"quality.log", "artifacts.tar"}  # at most 8

    parts = report["parts"]
    assert parts["install"]["missing_here"] == [] and parts["install"]["versions"]["fairseq"] == "0.12.3"
    assert parts["cuda_tests"]["passed"] > 50 and parts["cuda_tests"]["skipped"] == 0

    training = parts["training"]
    runs = {(r["model"], r["precision"]): r for r in training["runs"]}
    assert len(runs) == 15  # 3 models x 5 precisions
    for (_model, precision), run in runs.items():
        if precision == "fp16":  # FP16Optimizer needs CUDA
            assert run["status"] == "skipped" and "CUDA" in run["error"]
        else:
            assert run["status"] == "ok" and run["finite"] and run["last_loss"] < run["first_loss"], run
            assert run["speed_vs_dense"] is not None
    assert [g["status"] for g in training["generation"]] == ["ok"] * 3
    assert all(g["sentences"] == 50 for g in training["generation"])  # every test sentence of the slice
    assert training["fairseq_bf16"]["fails"], "fairseq 0.12's --bf16 needs a TPU"

    benchmarks = parts["benchmarks"]["reports"]
    assert set(benchmarks) == {"linear_cpu_float32", "linear_cpu_bfloat16", "translation_cpu_demo"}
    assert all(report["rows"] for report in benchmarks.values())
    (run,) = parts["quality"]["runs"]
    assert run["status"] == "done" and run["bleu"] is not None and run["averaged_epochs"] == 2

    with tarfile.open(out / "artifacts.tar") as tar:
        names = set(tar.getnames())
    assert "benchmarks/results/gpu/linear_cpu_bfloat16.md" in names
    assert "results/runs/gpu/multi30k_iwslt/phm_n4/seed1/result.json" in names
    markdown = (out / "report.md").read_text()
    assert all(f"| {name} | ok |" in markdown for name in report["parts"])


def running(pid: int) -> bool:
    """Whether process ``pid`` runs (a zombie, ended but not yet reaped by its new parent, does not)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return False
    return state != "Z"


def test_a_part_past_its_cap_is_stopped_with_what_it_started_and_the_next_part_runs(tmp_path, monkeypatch):
    monkeypatch.setattr(clock, "MIN_PART_SECONDS", 0)
    ctx = context(tmp_path)
    pid_file = tmp_path / "pid"

    def overrunning(ctx, deadline):
        # a shell whose child would outlive it: stopping the part stops the whole process group
        script = f"sleep 60 & echo $! > {pid_file}; wait"
        ctx.processes.run(["bash", "-c", script], tmp_path / "x.log", deadline)

    assert not plan.part(ctx, "training", 1, overrunning)
    assert ctx.report.status("training") == "timed out"
    assert not running(int(pid_file.read_text()))

    assert not plan.part(ctx, "benchmarks", 10, lambda ctx, deadline: 1 / 0)
    assert plan.part(ctx, "quality", 10, lambda ctx, deadline: {"runs": []})
    parts = json.loads((tmp_path / "report.json").read_text())["parts"]
    assert parts["benchmarks"]["status"] == "failed" and "ZeroDivisionError" in parts["benchmarks"]["error"]
    assert parts["quality"]["status"] == "ok"


# run.py's main() with one part's command replaced by a shell whose child would outlive it (both write
# their ids to PIDS): training as Processes.run() waits for it, data in a thread beside the main one,
# quality as its runs side by side
STOPPABLE = """
import importlib.util, pathlib, sys
spec = importlib.util.spec_from_file_location("gpu_run", sys.argv[1])
run = importlib.util.module_from_spec(spec)
spec.loader.exec_module(run)
from driver import plan, quality
part, out, pids = sys.argv[2], sys.argv[3], pathlib.Path(sys.argv[4])
script = ["bash", "-c", f"sleep 300 & echo $$ $! > {pids}.partial && mv {pids}.partial {pids}; wait"]
for other in set(plan.BODIES) - {part}:  # the parts it needs (install, data) run and succeed at once
    plan.BODIES[other] = lambda ctx, deadline: {}
if part == "quality":
    quality.command = lambda *args: script
else:
    plan.BODIES[part] = lambda ctx, deadline: ctx.processes.run(script, ctx.log(part), deadline)
sys.exit(run.main(["--mode", "cpu-dry-run", "--out", out, "--work", out + "/work", "--parts", part]))
"""


@pytest.mark.parametrize("part, signum", [("training", 15), ("data", 15), ("quality", 15), ("training", 2)])
def test_sigterm_or_ctrl_c_stops_the_running_parts_processes_and_the_report_says_stopped(part, signum, tmp_path):
    out, pids = tmp_path / "out", tmp_path / "pids"
    command = [sys.executable, "-c", STOPPABLE, str(GPU / "run.py"), part, str(out), str(pids)]
    # Ctrl-C as a terminal's foreground command gets it: SIGINT at its default, whatever this process
    # inherited (a shell's background job, as `make test &` or CI may start it, ignores SIGINT, and so
    # would the driver, which Python then never interrupts)
    process = subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )  # fmt: skip

    def started():  # the child, and the part reported running (quality: with its runs' rows)
        if not pids.exists() or not (out / "report.json").exists():
            return False
        reported = json.loads((out / "report.json").read_text())["parts"][part]
        return reported["status"] == "running" and (part != "quality" or "runs" in reported)

    deadline = time.time() + 60
    while not started() and process.poll() is None and time.time() < deadline:
        time.sleep(0.05)
    assert started(), process.communicate(timeout=60)[0] if process.poll() is not None else "not started in 60 s"
    shell, child = map(int, pids.read_text().split())
    process.send_signal(signum)  # SIGTERM, as `timeout` sends it, or Ctrl-C's SIGINT
    output = process.communicate(timeout=60)[0]
    assert process.returncode == (128 + 15 if signum == 15 else -2), output  # Python ends itself by SIGINT
    deadline = time.time() + 10  # killed, the sleep may take a moment to end after its shell
    while (running(shell) or running(child)) and time.time() < deadline:
        time.sleep(0.05)
    survivors = [pid for pid in (shell, child) if running(pid)]
    for pid in survivors:
        os.kill(pid, 9)
    assert not survivors, f"{part}: still running after run.py ended"
    report = json.loads((out / "report.json").read_text())
    assert report["parts"][part]["status"] == "stopped" and "SIGTERM or Ctrl-C" in report["parts"][part]["error"]
    if part == "quality":
        assert [row["status"] for row in report["parts"]["quality"]["runs"]] == ["stopped"]
    assert f"| {part} | stopped |" in (out / "report.md").read_text()


# a record phm-run wrote of a Multi30k run, which the fake phm-run below leaves as its own
RECORD = REPO / "results" / "runs" / "converged" / "multi30k_iwslt" / "phm_n4" / "seed1" / "result.json"
DONE_TRAINING = "2026-11-27 14:41:04 | INFO | fairseq_cli.train | done training in 12.0 seconds\n"


def test_a_quality_run_stopped_before_its_last_5_epochs_is_averaged_over_those_there_are(tmp_path, monkeypatch):
    program = load_script("quality")
    calls = []

    def fake_phm_run(config, runs_dir):
        # the first run: the time cap left 3 epochs of the recipe's 5, and averaging refused; the second: done
        calls.append(json.loads(config.read_text()).get("evaluate"))
        run = runs_dir / "gpu" / "multi30k_iwslt" / "phm_n4" / "seed1"
        (run / "checkpoints").mkdir(parents=True, exist_ok=True)
        if len(calls) == 1:
            for epoch in (1, 2, 3):
                (run / "checkpoints" / f"checkpoint{epoch}.pt").write_text("")
            (run / "train.log").write_text(DONE_TRAINING)
            return 1
        record = json.loads(RECORD.read_text())
        record["averaged_evaluation"]["averaged"] = [f"checkpoint{epoch}.pt" for epoch in (1, 2, 3)]
        (run / "result.json").write_text(json.dumps(record))
        return 0

    monkeypatch.setattr(program, "run_phm_run", fake_phm_run)
    row_file = tmp_path / "row.json"
    argv = ["--config", "multi30k_iwslt/phm_n4", "--data", str(tmp_path / "data"), "--runs-dir", str(tmp_path / "runs")]
    argv += ["--work", str(tmp_path / "work"), "--training-seconds", "300", "--row", str(row_file)]
    assert program.main(argv) == 0
    assert calls == [None, {"average_last": 3}]  # the recipe's own evaluation first
    written = json.loads(row_file.read_text())
    row, record = written["row"], json.loads(RECORD.read_text())
    assert (
        row["status"] == "done"
        and row["averaged_epochs"] == 3
        and row["config"] == "configs/gpu/multi30k_iwslt/phm_n4.yaml"
    )
    assert row["bleu"] == record["evaluation"]["score"] and row["without_embeddings"] > 0
    assert set(written["files"]) == {f"results/runs/gpu/multi30k_iwslt/phm_n4/seed1/{name}" for name in
                                     ("result.json", "train.log")}  # fmt: skip
    config = json.loads((tmp_path / "work" / "configs" / "gpu" / "multi30k_iwslt" / "phm_n4.yaml").read_text())
    assert config["evaluate"] == {"average_last": 3} and config["train"]["stop-time-hours"] == round(300 / 3600, 5)


def test_a_quality_run_that_ends_before_its_evaluation_reports_its_best_validation_so_far(tmp_path, monkeypatch):
    # an lr check chooses by best validation BLEU: a run cut off while evaluating still gives it
    program = load_script("quality")
    validations = "".join(
        f'2026-11-28 18:4{epoch}:00 | INFO | valid | {{"epoch": {epoch}, "valid_loss": "{loss}", '
        f'"valid_bleu": "{bleu}", "valid_num_updates": "{128 * epoch}"}}\n'
        for epoch, loss, bleu in ((1, 8.026, 4.34), (2, 6.096, 17.89), (3, 5.286, 26.93), (4, 4.9, 25.1))
    )

    def fake_phm_run(config, runs_dir):
        run = runs_dir / "gpu" / "multi30k_base_lr_check" / "phm_n4_lr001" / "seed1"
        run.mkdir(parents=True, exist_ok=True)
        (run / "train.log").write_text(validations)
        return 1

    monkeypatch.setattr(program, "run_phm_run", fake_phm_run)
    row_file = tmp_path / "row.json"
    argv = ["--config", "multi30k_base_lr_check/phm_n4_lr001", "--data", str(tmp_path / "data"), "--runs-dir",
            str(tmp_path / "runs"), "--work", str(tmp_path / "work"), "--row", str(row_file)]  # fmt: skip
    assert program.main(argv) == 1
    row = json.loads(row_file.read_text())["row"]
    assert (row["status"], row["epochs_validated"], row["best_valid"], row["best_epoch"]) == ("failed", 4, 26.93, 3)


# scripts/gpu/quality.py as the driver sees it: a row (running, then done) and the files it names
FAKE_QUALITY_RUN = """
import json, pathlib, sys
row, record = pathlib.Path(sys.argv[1]), pathlib.Path(sys.argv[2])
record.write_text("{}")
row.write_text(json.dumps({"row": {"config": "configs/gpu/multi30k_iwslt/phm_n4.yaml", "status": "done",
                                   "bleu": 30.0, "averaged_epochs": 3},
                           "files": {"results/runs/gpu/multi30k_iwslt/phm_n4/seed1/result.json": str(record)}}))
"""


def test_the_quality_part_reports_each_runs_row_and_archives_its_files(tmp_path, monkeypatch):
    record = tmp_path / "result.json"
    monkeypatch.setattr(quality, "command", lambda ctx, name, training_s, deadline, runs_dir, row: [
        sys.executable, "-c", FAKE_QUALITY_RUN, row, record])  # fmt: skip
    mode = modes.dataclasses.replace(modes.GPU, quality_configs=("multi30k_iwslt/phm_n4",))
    ctx = context(tmp_path, mode)
    assert plan.part(ctx, "quality", 300)
    reported = json.loads((tmp_path / "report.json").read_text())["parts"]["quality"]
    assert reported["runs"] == [{"config": "configs/gpu/multi30k_iwslt/phm_n4.yaml", "status": "done",
                                 "bleu": 30.0, "averaged_epochs": 3}]  # fmt: skip
    assert reported["training_cap_s"] > 0
    with tarfile.open(tmp_path / "artifacts.tar") as tar:
        assert tar.getnames() == ["results/runs/gpu/multi30k_iwslt/phm_n4/seed1/result.json"]


def test_a_quality_run_that_ends_without_its_row_is_reported_failed(tmp_path, monkeypatch):
    monkeypatch.setattr(quality, "command", lambda *args: [sys.executable, "-c", "raise SystemExit(3)"])
    ctx = context(tmp_path)
    assert not plan.part(ctx, "quality", 300)
    reported = json.loads((tmp_path / "report.json").read_text())["parts"]["quality"]
    assert reported["status"] == "failed" and reported["error"] == "did not finish: multi30k_iwslt/phm_n4 (3)"
    assert [row["status"] for row in reported["runs"]] == ["failed"]


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--cap", "training=soon"], "SECONDS is a number, e.g. training=240"),
        (["--cap", "quality=300"], "PART is one of install, data, cuda_tests, training, benchmarks"),
        (["--quality", "multi30k_base/phm_n5"], "no configs/gpu/multi30k_base/phm_n5.yaml"),
    ],
)
def test_a_wrong_cap_or_quality_run_is_refused_before_anything_runs(argv, message, tmp_path):
    command = [sys.executable, str(GPU / "run.py"), "--out", str(tmp_path / "out"), "--work", str(tmp_path), *argv]
    result = subprocess.run(command, capture_output=True, text=True, timeout=120)
    assert result.returncode == 2 and message in result.stderr, result.stderr
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--budget", "0"], "'0': the run's time in seconds, a number above 0, e.g. 510"),
        (["--budget", "-60"], "'-60': the run's time in seconds, a number above 0"),
        (["--budget", "nan"], "'nan': the run's time in seconds, a number above 0"),
        (["--cap", "training=-5"], "'training=-5': SECONDS is a number of at least 5 (no part starts with less)"),
        (["--cap", "data=nan"], "'data=nan': SECONDS is a number of at least 5"),
        (["--cap", "benchmarks=0"], "to leave the part out, leave it out of --parts"),
        (["--quality", "multi30k_base/phm_n4", "multi30k_base/transformer", "multi30k_base/phm_n4"],
         "--quality: multi30k_base/phm_n4 is named twice (each run has one folder): name each run once"),
    ],
)  # fmt: skip
def test_a_budget_or_cap_that_cannot_time_a_run_or_a_quality_run_named_twice_is_refused(argv, message, capsys):
    with pytest.raises(SystemExit) as exit_:
        cli.parse_args(["--out", "o", "--work", "w", *argv])
    assert exit_.value.code == 2 and message in capsys.readouterr().err


@pytest.mark.parametrize(
    "asked, run",
    [
        (["training"], ["install", "data", "training"]),  # a fresh machine has no wheels installed and no data
        (["quality", "install"], ["install", "data", "quality"]),
        (["cuda_tests"], ["install", "cuda_tests"]),
        (["data"], ["install", "data"]),
    ],
)
def test_the_parts_asked_bring_the_parts_they_need(asked, run):
    assert cli.parse_args(["--out", "o", "--work", "w", "--parts", *asked]).parts == run


def test_the_data_part_reuses_the_data_an_earlier_command_prepared(tmp_path, monkeypatch):
    ctx = context(tmp_path)
    ctx.data.mkdir(parents=True)
    (ctx.data / "prep.json").write_text(json.dumps({"seconds": 12.5, "splits": {"train": 29000}}))
    monkeypatch.setattr(ctx.processes, "run", lambda *args: pytest.fail("data-prep ran again"))
    assert plan.part(ctx, "data", 60)
    reported = json.loads((tmp_path / "report.json").read_text())["parts"]["data"]
    assert reported["reused"] is True and reported["seconds_to_prepare"] == 12.5


def test_an_out_or_work_folder_that_is_a_file_is_refused_with_a_message(tmp_path):
    file = tmp_path / "a-file"
    file.write_text("")
    for variable, message in (("OUT", "OUT (--out): "), ("PHM_GPU_WORK", "PHM_GPU_WORK (--work): ")):
        env = {**os.environ, "OUT": str(tmp_path / "out"), "PHM_GPU_WORK": str(tmp_path / "work"), variable: str(file)}
        result = subprocess.run(["bash", str(GPU / "run.sh"), "--cpu-dry-run", "--parts", "quality"], env=env,
                                capture_output=True, text=True, timeout=120)  # fmt: skip
        assert result.returncode == 2 and f"{message}{file} is a file, not a folder" in result.stderr, result.stderr
        env[variable] = str(file / "below")  # a file on the way
        result = subprocess.run(["bash", str(GPU / "run.sh"), "--cpu-dry-run", "--parts", "quality"], env=env,
                                capture_output=True, text=True, timeout=120)  # fmt: skip
        assert result.returncode == 1 and f"{variable}: cannot make the folder {file}/below" in result.stderr
        assert "Traceback" not in result.stderr, result.stderr


def test_a_relative_out_and_work_folder_are_taken_from_where_the_command_is_typed(tmp_path):
    out, work = f"gpu-out-{tmp_path.name}", f"gpu-work-{tmp_path.name}"  # names the repository has not
    env = {**os.environ, "OUT": out, "PHM_GPU_WORK": work}
    try:  # a budget of 1 s: quality is skipped at once, after the report is written
        result = subprocess.run(["bash", str(GPU / "run.sh"), "--cpu-dry-run", "--parts", "quality", "--budget", "1"],
                                cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)  # fmt: skip
        in_repository = [name for name in (out, work) if (REPO / name).exists()]
    finally:
        for name in (out, work):
            shutil.rmtree(REPO / name, ignore_errors=True)
    assert not in_repository, result.stderr
    report = json.loads((tmp_path / out / "report.json").read_text())
    assert report["parts"]["quality"]["status"] == "skipped" and (tmp_path / work).is_dir()


def test_budget_caps_and_quality_runs_given_on_the_command_line_are_the_runs():
    args = cli.parse_args(["--out", "o", "--work", "w", "--budget", "520", "--cap", "training=45",
                              "--quality", "multi30k_base/phm_n4", "multi30k_base/transformer"])  # fmt: skip
    mode = modes.settings(args)
    assert mode.budget_s == 520 and mode.caps == {**modes.GPU.caps, "training": 45.0}
    assert mode.quality_configs == ("multi30k_base/phm_n4", "multi30k_base/transformer")
    assert modes.settings(cli.parse_args(["--out", "o", "--work", "w"])) == modes.GPU


def test_a_training_of_the_matrix_starts_afresh_where_an_earlier_run_left_a_checkpoint(tmp_path, monkeypatch):
    program = load_script("training")
    args = program.argparse.Namespace(data=str(tmp_path), size="demo", tiny=True, updates=8, work=tmp_path,
                                       results=tmp_path / "results.jsonl", deadline=time.time() + 60)  # fmt: skip
    left = tmp_path / "demo" / "PHM_n4" / "fp32" / "checkpoint_last.pt"
    left.parent.mkdir(parents=True)
    left.write_text("an earlier run's (a rerun on a warm GPU machine resumed it and trained no update)")
    seen = []
    monkeypatch.setattr(program, "fairseq_train", lambda argv, bfloat16=False: seen.append(left.exists()))
    program.Matrix(args).train("PHM n=4", "fp32")
    assert seen == [False]
    (record,) = [json.loads(line) for line in args.results.read_text().splitlines()]
    assert record["model"] == "PHM n=4" and record["status"] == "failed"  # no log: no loss curve


def test_the_warm_up_is_reported_apart_and_its_speed_never_enters_a_ratio(tmp_path):
    def train(model, wps):
        return {"kind": "train", "size": "demo", "model": model, "precision": "fp16", "status": "ok",
                "words_per_second": wps, "peak_mib": 100.0}  # fmt: skip

    warm_up = {"kind": "warm-up", "size": "demo", "model": "dense twin", "precision": "fp16",
               "words_per_second_curve": [6000.0, 29000.0, 141000.0], "error": None, "seconds": 20.0}  # fmt: skip
    summary = training.summary([warm_up, train("dense twin", 140000.0), train("PHM n=4", 84000.0)])
    assert [r["speed_vs_dense"] for r in summary["runs"]] == [1.0, 0.6]
    assert plan.part(context(tmp_path), "training", 10, lambda ctx, deadline: summary)
    markdown = (tmp_path / "report.md").read_text()
    assert "Untimed warm-up before the demo runs (dense twin, fp16), words/s every tenth of its updates: 6k, 29k, " \
           "141k." in markdown  # fmt: skip


def fake_wheel(folder: Path, name: str, version: str) -> Path:
    """A pure-Python wheel of a module ``name`` with a console script, as pip installs it."""
    path = folder / f"{name}-{version}-py3-none-any.whl"
    info = f"{name}-{version}.dist-info"
    files = {
        f"{name}/__init__.py": "def main():\n    print('probe')\n",
        f"{info}/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n",
        f"{info}/WHEEL": "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
        f"{info}/entry_points.txt": f"[console_scripts]\n{name.replace('_', '-')} = {name}:main\n",
    }
    record = "".join(f"{file},,\n" for file in [*files, f"{info}/RECORD"])
    with zipfile.ZipFile(path, "w") as wheel:
        for file, text in {**files, f"{info}/RECORD": record}.items():
            wheel.writestr(file, text)
    return path


def test_missing_wheels_install_offline_into_the_site_folder_once(tmp_path):
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    fake_wheel(wheels, "phm_gpu_probe", "1.0")
    ctx = context(tmp_path, modes.GPU, wheels)
    entry = {"requirement": "phm-gpu-probe==1.0", "name": "phm-gpu-probe", "version": "1.0", "module": "phm_gpu_probe"}
    assert install.install_wheels(ctx, [entry], time.time() + 120) == ["phm_gpu_probe-1.0-py3-none-any.whl"]
    site = tmp_path / "work" / "site"
    probe = subprocess.run([site / "bin" / "phm-gpu-probe"], env=ctx.env, capture_output=True, text=True)
    assert probe.stdout == "probe\n", probe.stderr

    (site / "phm_gpu_probe" / "__init__.py").write_text("")  # a second install would overwrite this
    install.install_wheels(ctx, [entry], time.time() + 120)
    assert (site / "phm_gpu_probe" / "__init__.py").read_text() == ""

    missing = {**entry, "requirement": "phm-gpu-probe==2.0", "version": "2.0"}
    with pytest.raises(RuntimeError, match="has no wheel of it .*run scripts/gpu/wheels.sh"):
        install.install_wheels(ctx, [missing], time.time() + 120)


def test_the_wheel_list_pins_the_tested_versions_and_names_modules_that_import_here():
    def normal(name):
        return re.sub(r"[-_.]+", "-", name).lower()

    pinned = {}
    for line in (REPO / "constraints.txt").read_text().splitlines():
        if "==" in line and not line.startswith("#"):
            name, version = line.split("==")
            pinned[normal(name)] = version.strip()
    entries = install.read_wheel_list()
    assert {"fairseq", "hydra", "omegaconf", "bitarray", "sklearn", "pydantic", "sacremoses"} <= {
        e["module"] for e in entries
    }
    for entry in entries:
        assert entry["how"] in ("binary", "build")
        assert pinned.get(normal(entry["name"]), entry["version"]) == entry["version"], entry
        assert importlib.util.find_spec(entry["module"]) is not None, entry


def test_the_bfloat16_launcher_autocasts_fairseqs_amp_to_bfloat16_and_restores_it():
    from phm_fairseq.train_bf16 import bfloat16_amp

    x, w = torch.randn(3, 8), torch.randn(4, 8)
    autocast = torch.cuda.amp.autocast
    with bfloat16_amp():
        with torch.cuda.amp.autocast(enabled=True):  # as fairseq's training step asks for it
            assert F.linear(x, w).dtype == torch.bfloat16
        with torch.cuda.amp.autocast(enabled=False):
            assert F.linear(x, w).dtype == torch.float32
    assert torch.cuda.amp.autocast is autocast


@pytest.mark.parametrize(
    "argv, message",
    [
        (["DATA", "--arch", "phm_transformer_demo"], "add --amp"),
        (["DATA", "--amp", "--fp16"], "--fp16 cannot go with --amp in bfloat16"),
        (["DATA", "--amp", "--bf16", "--memory-efficient-fp16"], "leave them out"),
    ],
)
def test_the_bfloat16_launcher_refuses_a_command_line_it_would_not_train_in_bfloat16(argv, message):
    from phm_fairseq.train_bf16 import check_arguments

    with pytest.raises(SystemExit, match=message):
        check_arguments(argv)
