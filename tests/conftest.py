import math
import os
import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent

# how phm-run starts fairseq-train (phm_fairseq.experiments.fairseq_train), as its logs show the command
TRAIN_COMMAND = "python -m phm_fairseq.experiments.fairseq_train"

# the sizes of a tiny translation Transformer, as fairseq-train options (the phm-run configs of the tests)
TINY = {
    "encoder-layers": 1,
    "decoder-layers": 1,
    "encoder-embed-dim": 32,
    "decoder-embed-dim": 32,
    "encoder-ffn-embed-dim": 64,
    "decoder-ffn-embed-dim": 64,
    "encoder-attention-heads": 2,
    "decoder-attention-heads": 2,
}


@pytest.fixture(scope="session")
def shared_data() -> Path:
    """The workplace's real corpora (SICK, SNLI, SVA, ...): ``PHM_SHARED_DATA`` or ../shared/data.

    Skipped where absent, unless ``PHM_REQUIRE_SHARED_DATA=1`` (CI), where absence is a failure.
    """
    path = Path(os.environ.get("PHM_SHARED_DATA", REPO.parent / "shared" / "data"))
    if not path.is_dir():
        message = f"real corpora not found at {path} (set PHM_SHARED_DATA)"
        if os.environ.get("PHM_REQUIRE_SHARED_DATA") == "1":
            pytest.fail(message)
        pytest.skip(message)
    return path


def console(name: str) -> str:
    """A console command of the interpreter running the tests (fairseq-train, phm-run, ...)."""
    import sys

    beside = Path(sys.executable).parent / name
    return str(beside) if beside.exists() else name


def run_command(*args, check=True, timeout=600, env=None):
    """Runs a command; on failure shows its output, which is what explains the failure."""
    import subprocess

    result = subprocess.run([str(a) for a in args], capture_output=True, text=True, timeout=timeout, env=env)
    if check and result.returncode:
        command = " ".join(map(str, args))
        raise AssertionError(
            f"{command} failed ({result.returncode}):\n{result.stdout[-3000:]}\n{result.stderr[-5000:]}"
        )
    return result


def fairseq_preprocess(raw: Path, source: str, target: str, *extra, dest=None) -> Path:
    """Binarizes raw/{train,valid,test}.{source,target} with a joined dictionary into dest (raw/bin)."""
    dest = dest or raw / "bin"
    run_command(
        console("fairseq-preprocess"),
        *("--source-lang", source, "--target-lang", target),
        *("--trainpref", raw / "train", "--validpref", raw / "valid", "--testpref", raw / "test"),
        *("--destdir", dest, "--joined-dictionary", "--workers", "1"),
        *extra,
    )
    return dest


def fairseq_generate(data: Path, checkpoint: Path, *extra, check=True):
    """fairseq-generate on the test split as the README runs it (beam 5, lenpen 0.6), with the plugin."""
    import phm_fairseq

    return run_command(
        console("fairseq-generate"),
        data,
        *("--user-dir", phm_fairseq.__path__[0], "--path", checkpoint, "--gen-subset", "test"),
        *("--beam", "5", "--lenpen", "0.6", "--required-batch-size-multiple", "1"),
        *extra,
        check=check,
    )


def assert_trained_in_half_precision(log: str, fall: float) -> None:
    """The log of fairseq-train --memory-efficient-fp16: the loss scaler at work (loss_scale in every logged
    step), finite losses that fell below ``fall`` x the first, and no overflow loop (each overflow skips a
    step and halves the scale: a few while it settles at most, and never fairseq's minimum scale)."""
    steps = re.findall(r"\| train_inner \|.*?loss=([^,]+),.*?loss_scale=([^,]+),", log)
    assert len(steps) >= 2, f"no half-precision training steps logged:\n{log[-3000:]}"
    losses = [float(loss) for loss, _scale in steps]
    assert all(map(math.isfinite, losses)) and losses[-1] < fall * losses[0], losses
    overflows = log.count("gradient overflow detected")
    assert overflows <= 3 and "Minimum loss scale reached" not in log, f"{overflows} overflows: {steps}"


@pytest.fixture(scope="session")
def copy_task(tmp_path_factory) -> Path:
    """A synthetic copy task (random digit strings), binarized with a joined dictionary."""
    import random

    root = tmp_path_factory.mktemp("copy_task")
    rng = random.Random(0)
    sizes = {"train": 3000, "valid": 100, "test": 64}
    for split, size in sizes.items():
        lines = [" ".join(rng.choice("0123456789abcdef") for _ in range(rng.randint(3, 8))) for _ in range(size)]
        for lang in ("src", "tgt"):
            (root / f"{split}.{lang}").write_text("\n".join(lines) + "\n")
    return fairseq_preprocess(root, "src", "tgt")


@pytest.fixture(scope="session")
def multi30k_slice(tmp_path_factory) -> Path:
    """The first 2,000 training pairs of the bundled Multi30k en-de, word-level (no BPE)."""
    import gzip

    root = tmp_path_factory.mktemp("multi30k")
    sources = {"train": ("train", 2000), "valid": ("val", 100), "test": ("test_2016_flickr", 50)}
    for split, (name, size) in sources.items():
        for lang in ("en", "de"):
            with gzip.open(REPO / "data" / "multi30k" / f"{name}.{lang}.gz", "rt", encoding="utf-8") as f:
                lines = [line.lower().replace(".", " .").replace(",", " ,") for line in f.read().splitlines()[:size]]
            (root / f"{split}.{lang}").write_text("\n".join(lines) + "\n")
    return fairseq_preprocess(root, "en", "de", "--thresholdsrc", "2")
