"""The GPU run's quality part, one run (the driver's quality part starts one per config, side by side):
phm-run of configs/gpu/NAME.yaml on the run's data, its training capped by fairseq's --stop-time-hours
(the dry run: its tiny models for 2 epochs), then scored on test2016: the best checkpoint, and the last
epochs averaged, as many as the cap left where that is fewer than the recipe's 5. The run's row of the
report goes to --row as it goes: running (with the epochs validated), then done with its record's
figures, or failed; with it the files that artifacts.tar takes.

    python scripts/gpu/quality.py --config multi30k_iwslt/phm_n4 --data DATA --runs-dir RUNS --work WORK \\
        --training-seconds 300 --row ROW.json
"""

import argparse
import json
import math
import os
import sys
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))  # run as a file: the plugin and the kit from this checkout

from phm_experiments.averaging import epoch_checkpoints  # noqa: E402
from phm_experiments.cli import run as phm_run  # noqa: E402
from phm_experiments.config import load_config  # noqa: E402
from phm_experiments.logs import TrainingLog  # noqa: E402
from phm_experiments.results import Result  # noqa: E402
from phm_experiments.run_folder import RunFolder  # noqa: E402
from phm_experiments.training import stopping  # noqa: E402

# the dry run's tiny models (tests/conftest.py's TINY), for 2 epochs
TINY_TRAIN = {
    **{f"{side}-{key}": value for side in ("encoder", "decoder") for key, value in (("layers", 1), ("embed-dim", 32))},
    **{f"{side}-ffn-embed-dim": 64 for side in ("encoder", "decoder")},
    **{f"{side}-attention-heads": 2 for side in ("encoder", "decoder")},
    "max-tokens": 1024,
    "num-workers": 0,
    "max-epoch": 2,
    "patience": None,
}
AVERAGE_AGAIN_S = 45  # the least time before the deadline to average and evaluate again
PROGRESS_S = 5  # the row is rewritten this often while phm-run runs


def write_config(args, average_last: int = None) -> Path:
    """WORK/configs/gpu/NAME.yaml: configs/gpu/NAME.yaml on the run's data, capped in time, as phm-run reads
    it (JSON is YAML). Its run folder is RUNS/gpu/NAME/seed1, as the original's would be."""
    train = {"stop-time-hours": round(args.training_seconds / 3600, 5)}
    if args.tiny:
        train = {**TINY_TRAIN, "stop-time-hours": None}
    config = {
        "extends": str(REPO / "configs" / "gpu" / f"{args.config}.yaml"),
        "data": str(args.data),
        "prepare": f"bash data-prep/multi30k.sh --src-dir data/multi30k --out {args.data}",
        "train": train,
    }
    if args.tiny or average_last:
        config["evaluate"] = {"average_last": average_last or 2}
    path = args.work / "configs" / "gpu" / f"{args.config}.yaml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(config, indent=2) + "\n")
    return path


def run_phm_run(config: Path, runs_dir: Path) -> int:
    """phm-run CONFIG --runs-dir RUNS in this process; its exit code."""
    try:
        return phm_run.main([str(config), "--runs-dir", str(runs_dir)]) or 0
    except SystemExit as end:
        return end.code if isinstance(end.code, int) else 1


def epochs_to_average(config: Path, folder: RunFolder):
    """The epoch checkpoints there are, where the training ended normally with fewer than the config's
    evaluate.average_last (its time cap came first) but at least 2; else None."""
    log = folder.log("train")
    if not log.exists() or not TrainingLog.parse(log.read_text(encoding="utf-8", errors="replace")).done:
        return None
    wanted = load_config(config).evaluate.average_last
    saved = len(epoch_checkpoints(folder.checkpoints))
    return saved if wanted and 2 <= saved < wanted else None


def progress(config, folder: RunFolder) -> dict:
    """The run's figures so far, from its training log: the epochs validated and the best validation yet
    (what an lr check chooses by), so that a run stopped before its evaluation still reports them."""
    log = folder.log("train")
    parsed = TrainingLog.parse(log.read_text(encoding="utf-8", errors="replace") if log.exists() else "")
    best = stopping(config, parsed)
    return {"epochs_validated": len(parsed.validations("loss")), **{k: best[k] for k in ("best_valid", "best_epoch")}}


def result_row(result: Result) -> dict:
    training, evaluation, averaged = result.training, result.evaluation, result.averaged_evaluation
    return {
        "status": "done",
        "arch": result.arch,
        "parameters": result.parameters.total,
        "without_embeddings": result.parameters.without_embeddings,
        "bleu": evaluation.score,
        "chrf": evaluation.chrf,
        "averaged_bleu": averaged.score if averaged else None,
        "averaged_chrf": averaged.chrf if averaged else None,
        "averaged_epochs": len(averaged.averaged or []) or None if averaged else None,
        "best_valid": training.best_valid,
        "best_epoch": training.best_epoch,
        "epochs": training.last_epoch,
        "updates": training.updates,
        "stopped_early": training.stopped_early,
        "words_per_second": training.words_per_second,
        "train_seconds": training.train_seconds,
    }


class Row:
    """The run's row of the report, in the file ``path``, rewritten whole."""

    def __init__(self, path: Path, name: str, config, folder: RunFolder, runs_dir: Path):
        self.path, self.config, self.folder = path, config, folder
        self.row = {"config": f"configs/gpu/{name}.yaml", "status": "running"}
        self.archive = Path("results/runs") / folder.path.relative_to(runs_dir)  # as artifacts.tar holds it
        self.lock = threading.Lock()

    def write(self, **values) -> None:
        with self.lock:
            self.row.update(values)
            files = [self.folder.result, self.folder.log("train"), self.folder.log("evaluate")]
            record = {"row": self.row, "files": {str(self.archive / p.name): str(p) for p in files if p.exists()}}
            partial = self.path.with_name(f".{self.path.name}.partial")
            partial.write_text(json.dumps(record, indent=2) + "\n", encoding="utf-8")
            os.replace(partial, self.path)

    def follow(self) -> threading.Event:
        """Rewrites the row with the run's progress every few seconds, until the event returned is set."""
        done = threading.Event()

        def rewrite():
            while not done.wait(PROGRESS_S):
                self.write(**progress(self.config, self.folder))

        threading.Thread(target=rewrite, daemon=True).start()
        return done


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", required=True, metavar="FOLDER/NAME", help="configs/gpu/FOLDER/NAME.yaml")
    parser.add_argument("--data", type=Path, required=True, help="Multi30k en-de prepared by data-prep/multi30k.sh")
    parser.add_argument("--runs-dir", type=Path, required=True)
    parser.add_argument("--work", type=Path, required=True, help="the configs as run go here")
    parser.add_argument("--training-seconds", type=float, default=math.inf, help="fairseq's --stop-time-hours")
    parser.add_argument("--deadline", type=float, default=math.inf, help="UNIX time: evaluate again only before")
    parser.add_argument("--tiny", action="store_true", help="the dry run's tiny models, 2 epochs")
    parser.add_argument("--row", type=Path, required=True, help="the run's row of the report (JSON)")
    args = parser.parse_args(argv)

    config = write_config(args)
    folder = RunFolder.of(config, args.runs_dir, 1)
    row = Row(args.row, args.config, load_config(config), folder, args.runs_dir)  # read once, not at each rewrite
    row.write()
    following = row.follow()
    code = run_phm_run(config, args.runs_dir)
    if code >= 128:  # stopped (SIGTERM, Ctrl-C): the driver reports it
        return code
    epochs = epochs_to_average(config, folder) if code else None
    if epochs and time.time() < args.deadline - AVERAGE_AGAIN_S:
        # the time cap left fewer epochs than the recipe averages: evaluated again with those there are
        print(f"== {args.config}: {epochs} epoch checkpoints: averaging those", flush=True)
        code = run_phm_run(write_config(args, average_last=epochs), args.runs_dir)
    following.set()
    if code == 0:
        row.write(**result_row(Result.read(folder.result)))
    else:
        error = f"phm-run: exit code {code} (its output: the run's log)"
        row.write(status="failed", error=error, **progress(row.config, folder))
    return code


if __name__ == "__main__":
    sys.exit(main())
