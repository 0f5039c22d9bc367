"""The GPU run's training part at one model size: fairseq-train of the dense twin, PHM n=4 and the
quaternion model in each precision (on CUDA after an untimed --fp16 warm-up), then fairseq-generate
--fp16 of each model's float32 checkpoint, all in this one process (torch, fairseq and CUDA start once).
Each finished step appends one JSON line to --results, so that whatever finished is kept if the process
is stopped.

    python scripts/gpu/training.py --data DATA --size demo --updates 200 --work DIR --results FILE

Precisions: fp32; fairseq's --fp16 (float16 weights, float32 master copy; CUDA only),
--memory-efficient-fp16 (float16 weights only) and --amp (float16 autocast); bf16-amp: --amp with
bfloat16 autocast through phm_fairseq.train_bf16. fairseq's own --bf16 is tried for one update and its
error recorded: it sets --tpu and needs torch_xla.
"""

import argparse
import functools
import gc
import json
import logging
import math
import shutil
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))  # run as a file: the plugin and the kit from this checkout

from fairseq_cli import train  # noqa: E402, I001  (first, as in fairseq-train: it sets up the logging)
import sacrebleu  # noqa: E402
import torch  # noqa: E402
from fairseq import options  # noqa: E402
from fairseq_cli import generate  # noqa: E402

import phm_fairseq  # noqa: E402
from phm_experiments import cpu_half_precision  # noqa: E402
from phm_experiments.evaluation import generated, generation_speed  # noqa: E402
from phm_experiments.logs import TrainingLog  # noqa: E402
from phm_fairseq.train_bf16 import bfloat16_amp  # noqa: E402

MODELS = {
    "dense twin": ["--arch", "transformer_twin_{size}"],
    "PHM n=4": ["--arch", "phm_transformer_{size}", "--phm-n", "4"],
    "quaternion": ["--arch", "quaternion_transformer_{size}"],
}
PRECISIONS = {  # in the order they run: fairseq's own first
    "fp32": [],
    "fp16": ["--fp16"],
    "amp": ["--amp"],
    "memory-efficient-fp16": ["--memory-efficient-fp16"],
    "bf16-amp": ["--amp"],  # trained within phm_fairseq.train_bf16.bfloat16_amp
}
# the small-budget Multi30k recipe (configs/small/multi30k); its warm-up is half of the run's updates
RECIPE = [
    *("--task", "translation", "--source-lang", "en", "--target-lang", "de", "--share-all-embeddings"),
    *("--optimizer", "adam", "--adam-betas", "(0.9, 0.98)", "--lr", "0.002"),
    *("--lr-scheduler", "inverse_sqrt"),
    *("--criterion", "label_smoothed_cross_entropy", "--label-smoothing", "0.1", "--dropout", "0.1"),
    *("--max-tokens", "4096", "--seed", "1", "--data-buffer-size", "0"),
    # every training and generation runs in this one process: a loader process left by one (a training stopped
    # by --max-update, a generation) takes 5 s to shut down when the garbage collector finds it, 30 times a size
    *("--num-workers", "0"),
    *("--disable-validation", "--no-epoch-checkpoints", "--log-format", "json"),
]
# the tiny sizes of the CPU dry run (tests/conftest.py's TINY)
TINY = [
    *("--encoder-layers", "1", "--decoder-layers", "1", "--encoder-embed-dim", "32", "--decoder-embed-dim", "32"),
    *("--encoder-ffn-embed-dim", "64", "--decoder-ffn-embed-dim", "64"),
    *("--encoder-attention-heads", "2", "--decoder-attention-heads", "2"),
    *("--max-tokens", "1024"),
]
GENERATE = ["--gen-subset", "test", "--beam", "5", "--lenpen", "0.6", "--batch-size", "128"]
GENERATE += ["--required-batch-size-multiple", "1", "--max-len-a", "1.2", "--max-len-b", "10", "--fp16"]
GENERATE += ["--num-workers", "0"]  # as RECIPE's


class Captured(logging.Handler):
    """fairseq's log records as fairseq-train writes them (phm_experiments.logs reads that format)."""

    def __init__(self):
        super().__init__(logging.INFO)
        self.setFormatter(
            logging.Formatter("%(asctime)s | %(levelname)s | %(name)s | %(message)s", "%Y-%m-%d %H:%M:%S")
        )
        self.lines = []

    def emit(self, record):
        self.lines.append(self.format(record))

    @property
    def text(self) -> str:
        return "\n".join(self.lines)


def capturing(fn):
    """(fn's result or the exception it raised, fairseq's log meanwhile)."""
    handler = Captured()
    logging.getLogger().addHandler(handler)
    try:
        return fn(), None, handler.text
    except (Exception, SystemExit) as error:  # fairseq exits with SystemExit on bad arguments
        return None, f"{type(error).__name__}: {error}".strip()[:2000], handler.text
    finally:
        logging.getLogger().removeHandler(handler)


def model_flags(model: str, size: str) -> list:
    return [flag.format(size=size) for flag in MODELS[model]]


def fairseq_train(argv: list, bfloat16: bool = False) -> None:
    """fairseq-train's cli_main with ``argv`` (in bfloat16 autocast with ``bfloat16``)."""
    sys.argv = ["fairseq-train", *argv]
    if bfloat16:
        with bfloat16_amp():
            train.cli_main()
    else:
        train.cli_main()


def fairseq_generate(argv: list) -> None:
    generate.main(options.parse_args_and_arch(options.get_generation_parser(), input_args=argv))


def device_memory():
    """Resets the peak-memory counter (CUDA); returns the reader of the peak since, in MiB (None on CPU)."""
    gc.collect()
    if not torch.cuda.is_available():
        return lambda: None
    torch.cuda.empty_cache()
    torch.cuda.reset_peak_memory_stats()
    return lambda: round(torch.cuda.max_memory_allocated() / 2**20, 1)


def training_record(log: TrainingLog, text: str, updates: int) -> dict:
    """What a training shows: its loss curve (finite, falling), words/s after the first quarter of its
    updates (the warm-up of kernels and allocator left out), and the loss scaler's overflows."""
    curve = [(int(s["num_updates"]), s["loss"]) for s in log.inner if "loss" in s]
    losses = [loss for _, loss in curve]
    steady = [s["wps"] for s in log.inner if int(s["num_updates"]) > updates // 4 and isinstance(s.get("wps"), float)]
    finite = bool(losses) and all(isinstance(x, float) and math.isfinite(x) for x in losses)
    return {
        "updates": log.final_updates,
        "loss_curve": curve,
        "first_loss": losses[0] if losses else None,
        "last_loss": losses[-1] if losses else None,
        "finite": finite,
        "falling": finite and len(losses) >= 2 and losses[-1] < 0.98 * losses[0],
        "words_per_second": statistics.median(steady) if steady else None,
        "overflows": text.count("gradient overflow detected") + text.count("AMP: overflow detected"),
        "loss_scale": log.inner[-1].get("loss_scale") if log.inner else None,
    }


class Matrix:
    """The runs at one size, each appending its record to the results file."""

    def __init__(self, args):
        self.args, self.durations = args, []
        self.cuda = torch.cuda.is_available()
        common = [args.data, "--user-dir", phm_fairseq.PLUGIN_DIR, *RECIPE, *(TINY if args.tiny else [])]
        common += ["--warmup-updates", str(max(1, args.updates // 2))]
        common += ["--log-interval", str(max(1, args.updates // 10))]
        self.common = common + ([] if self.cuda else ["--cpu"])

    def emit(self, record: dict) -> None:
        with open(self.args.results, "a", encoding="utf-8") as out:
            out.write(json.dumps({"size": self.args.size, **record}) + "\n")

    def fits(self) -> bool:
        """Whether a run as long as the longest so far would end before the deadline."""
        return time.time() + max(self.durations, default=0) < self.args.deadline

    def timed(self, fn):
        """(fn's error, fairseq's log, seconds, peak device MiB) of ``fn()``."""
        peak = device_memory()
        start = time.time()
        _, error, text = capturing(fn)
        self.durations.append(time.time() - start)
        return error, text, round(self.durations[-1], 1), peak()

    def bf16_check(self) -> None:
        """fairseq's own --bf16, for one update: it sets --tpu, which needs torch_xla."""
        argv = [*self.common, *model_flags("PHM n=4", self.args.size), "--bf16", "--max-update", "1", "--no-save"]
        argv += ["--save-dir", str(self.args.work / self.args.size / "bf16-check")]  # fairseq makes it even so
        error, _, _, _ = self.timed(functools.partial(fairseq_train, argv))
        self.emit({"kind": "bf16-check", "fails": error is not None, "error": error})

    def fresh_run(self, model: str, precision: str, save_dir: Path) -> list:
        """fairseq-train's arguments for ``model`` in ``precision``, saving to ``save_dir``, emptied first:
        fairseq would resume a checkpoint an earlier run left there (a rerun on a warm machine)."""
        shutil.rmtree(save_dir, ignore_errors=True)
        argv = [*self.common, *model_flags(model, self.args.size), *PRECISIONS[precision]]
        return argv + ["--max-update", str(self.args.updates), "--save-dir", str(save_dir)]

    def warm_up(self) -> None:
        """An untimed --fp16 training of the dense twin before the timed ones. On the H200 (GPU run of
        2026-11-27) the first --fp16 training of a process ran at a fifth of its later speed for about 120
        updates, which made whichever model ran first in float16 look the slowest."""
        argv = self.fresh_run("dense twin", "fp16", self.args.work / self.args.size / "warm-up") + ["--no-save"]
        error, text, seconds, _ = self.timed(functools.partial(fairseq_train, argv))
        curve = [s.get("wps") for s in TrainingLog.parse(text).inner]
        self.emit({"kind": "warm-up", "model": "dense twin", "precision": "fp16", "words_per_second_curve": curve,
                   "error": error, "seconds": seconds})  # fmt: skip

    def train(self, model: str, precision: str):
        """One training; the checkpoint it saved (fp32 only: fairseq-generate reads those), or None."""
        record = {"kind": "train", "model": model, "precision": precision}
        if precision == "fp16" and not self.cuda:
            self.emit({**record, "status": "skipped", "error": "--fp16 needs CUDA (fairseq's FP16Optimizer)"})
            return None
        if not self.fits():
            self.emit({**record, "status": "not started", "error": "the part's time ran out"})
            return None
        save_dir = self.args.work / self.args.size / model.replace(" ", "_").replace("=", "") / precision
        argv = self.fresh_run(model, precision, save_dir) + ([] if precision == "fp32" else ["--no-save"])
        error, text, seconds, peak_mib = self.timed(
            functools.partial(fairseq_train, argv, bfloat16=precision == "bf16-amp")
        )
        result = training_record(TrainingLog.parse(text), text, self.args.updates)
        status = "ok" if error is None and result["finite"] and result["falling"] else "failed"
        self.emit({**record, **result, "peak_mib": peak_mib, "status": status, "error": error, "seconds": seconds})
        return save_dir / "checkpoint_last.pt" if precision == "fp32" and error is None else None

    def generate(self, model: str, checkpoint: Path) -> None:
        """fairseq-generate --fp16 of ``checkpoint`` on test2016: every sentence, finite scores, BLEU."""
        record = {"kind": "generate", "model": model, "precision": "fp16", "checkpoint": "fp32 run"}
        if not self.fits():
            self.emit({**record, "status": "not started", "error": "the part's time ran out"})
            return
        data = Path(self.args.data)
        results = checkpoint.parent / "generate"
        prep = json.loads((data / "prep.json").read_text())
        argv = [str(data), "--user-dir", phm_fairseq.PLUGIN_DIR, "--path", str(checkpoint), *GENERATE]
        argv += [*prep["generate_argv"], "--results-path", str(results)] + ([] if self.cuda else ["--cpu"])
        error, text, seconds, peak_mib = self.timed(functools.partial(fairseq_generate, argv))
        output = results / "generate-test.txt"
        output = output.read_text(encoding="utf-8") if output.exists() else ""
        references = (data / "raw" / "test.de").read_text(encoding="utf-8").splitlines()
        hypotheses = generated(output)
        scores = [float(line.split("\t")[1]) for line in output.split("\n") if line.startswith("H-")]
        complete = sorted(hypotheses) == list(range(len(references)))
        finite = bool(scores) and all(map(math.isfinite, scores))
        ordered = [hypotheses[i] for i in range(len(references))] if complete else None
        _, per_second = generation_speed(text)
        self.emit(
            {
                **record,
                "status": "ok" if error is None and complete and finite else "failed",
                "error": error or (None if complete else f"{len(hypotheses)} of {len(references)} sentences"),
                "sentences": len(hypotheses),
                "finite_scores": finite,
                "bleu": round(sacrebleu.corpus_bleu(ordered, [references]).score, 2) if complete else None,
                "sentences_per_second": per_second,
                "peak_mib": peak_mib,
                "seconds": seconds,
            }
        )


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", required=True, help="Multi30k en-de prepared by data-prep/multi30k.sh")
    parser.add_argument("--size", required=True, choices=["demo", "iwslt", "base"])
    parser.add_argument("--tiny", action="store_true", help="the CPU dry run's tiny sizes on the --size architectures")
    parser.add_argument("--updates", type=int, default=200)
    parser.add_argument("--precisions", nargs="+", default=list(PRECISIONS), choices=list(PRECISIONS))
    parser.add_argument("--work", type=Path, required=True, help="checkpoints and generations go here")
    parser.add_argument("--results", type=Path, required=True, help="JSON lines, one per finished step")
    parser.add_argument("--deadline", type=float, default=math.inf, help="UNIX time: start nothing to end later")
    parser.add_argument("--bf16-check", action="store_true", help="also try fairseq's own --bf16 for one update")
    args = parser.parse_args()

    cpu_half_precision.install()  # --memory-efficient-fp16 on a CPU (changes nothing where there is CUDA)
    matrix = Matrix(args)
    if args.bf16_check:
        matrix.bf16_check()
    if matrix.cuda and any(precision != "fp32" for precision in args.precisions):
        matrix.warm_up()
    for precision in args.precisions:
        checkpoints = {model: matrix.train(model, precision) for model in MODELS}
        for model, checkpoint in checkpoints.items():  # generation right after fp32, before the other precisions
            if checkpoint is not None:
                matrix.generate(model, checkpoint)


if __name__ == "__main__":
    main()
