import contextlib
import logging
import math
import os
import re
import shutil
import signal
import sys
from pathlib import Path

import pytest
from filelock import FileLock

# One thread for this process and every process it starts: under pytest-xdist (make test) the workers
# share the cores. Set before torch is first imported, which reads it then; a value already set is kept.
os.environ.setdefault("OMP_NUM_THREADS", "1")

REPO = Path(__file__).resolve().parent.parent

pytest_plugins = ["cost_report"]  # pytest --cost-report FILE: each test's wall and CPU seconds

# how phm-run starts fairseq-train (phm_experiments.fairseq_train), as its logs show the command
TRAIN_COMMAND = "python -m phm_experiments.fairseq_train"

# every fairseq command of the tests: no prefetch thread, which can abort a process at exit after
# its work (docs/troubleshooting.md); phm-run passes the same to its commands
NO_PREFETCH_THREAD = ("--data-buffer-size", "0")
# and those run in this process: no loader process either. A loader process that fairseq leaves behind
# (generation, a training stopped by --max-update) takes 5 s to shut down when the garbage collector
# finds it (torch's worker status interval), in this process and not in one that exits
IN_PROCESS_LOADER = ("--num-workers", "0")

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


def slow(fixture_function):
    """Marks a fixture that trains a model or prepares a corpus with fairseq's commands: every test that
    uses it, directly or through another fixture, is marked slow (make test-fast leaves it out)."""
    fixture_function.slow = True
    return fixture_function


def pytest_collection_modifyitems(items):
    for item in items:
        definitions = item._fixtureinfo.name2fixturedefs.values() if hasattr(item, "_fixtureinfo") else ()
        if any(getattr(definition.func, "slow", False) for chain in definitions for definition in chain):
            item.add_marker(pytest.mark.slow)


@pytest.fixture(autouse=True)
def torch_seeded():
    """torch's generator starts each test at seed 0: what a test draws does not depend on the tests that ran
    before it in its process (under pytest-xdist, a worker's share of the modules, which changes from run to run)."""
    import torch

    torch.manual_seed(0)


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


def run_main(main, *args, check=True):
    """A command's ``main(argv)`` (phm-run, phm-collect, phm-params, ...) in this process, where torch
    and fairseq are imported already: what run_command gives (returncode, stdout, stderr), without the
    seconds a new process spends importing them."""
    import io
    import subprocess

    argv = [str(a) for a in args]
    out, err = io.StringIO(), io.StringIO()
    # a command sets its own signal handlers (phm-run: SIGTERM stops it as Ctrl-C does); this process gets its own back
    handlers = {number: signal.getsignal(number) for number in (signal.SIGINT, signal.SIGTERM)}
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main(argv) or 0
        except SystemExit as exit:  # argparse's and the commands' own exits
            code = exit.code
            if not isinstance(code, int):  # as Python exits: None is success, a message goes to stderr
                if code is not None:
                    print(code, file=sys.stderr)
                code = 0 if code is None else 1
        finally:
            for number, handler in handlers.items():
                signal.signal(number, handler)
    result = subprocess.CompletedProcess(argv, code, out.getvalue(), err.getvalue())
    if check and code:
        raise AssertionError(
            f"{main.__module__} {' '.join(argv)} failed ({code}):\n{result.stdout[-3000:]}\n{result.stderr[-5000:]}"
        )
    return result


def classes_in_checkpoint(path) -> list:
    """The classes a checkpoint's pickle names beyond torch's own (what weights_only loading must
    allow), whatever this process has allowed already (the plugin allows argparse.Namespace)."""
    import torch

    allowed = torch.serialization.get_safe_globals()
    torch.serialization.clear_safe_globals()
    try:
        return sorted(torch.serialization.get_unsafe_globals_in_checkpoint(path))
    finally:
        torch.serialization.add_safe_globals(allowed)


def fairseq_preprocess(raw: Path, source: str, target: str, *extra, dest=None) -> Path:
    """Binarizes raw/{train,valid,test}.{source,target} with a joined dictionary into dest (raw/bin):
    fairseq-preprocess's own main, in this process."""
    dest = dest or raw / "bin"
    run_main(
        preprocess_main,
        *("--source-lang", source, "--target-lang", target),
        *("--trainpref", raw / "train", "--validpref", raw / "valid", "--testpref", raw / "test"),
        *("--destdir", dest, "--joined-dictionary", "--workers", "1"),
        *extra,
    )
    return dest


def preprocess_main(argv):
    """fairseq-preprocess's cli_main on ``argv``, logging to stdout as the command does."""
    from fairseq import options
    from fairseq_cli import preprocess

    args = options.get_preprocessing_parser().parse_args(argv)
    handlers = set(preprocess.logger.handlers)
    try:
        with fairseq_logging():
            preprocess.main(args)
    finally:  # main adds a handler that writes DESTDIR/preprocess.log: one per call, closed after it
        for handler in set(preprocess.logger.handlers) - handlers:
            preprocess.logger.removeHandler(handler)
            handler.close()


def generate_args(data: Path) -> list:
    """Moses tokenization and subword-nmt BPE as data-prep wrote them into data/prep.json: fairseq's options that
    read raw sentences and print detokenized hypotheses."""
    import json

    return json.loads((data / "prep.json").read_text())["generate_args"].split()


def fairseq_generate(data: Path, checkpoint: Path, *extra, check=True):
    """fairseq-generate on the test split as the README runs it (beam 5, lenpen 0.6), with the plugin: its own
    main in this process, its output and log records in ``.stdout`` as the command prints them."""
    import phm_fairseq

    return run_main(
        generate_main,
        data,
        *("--user-dir", phm_fairseq.__path__[0], "--path", checkpoint, "--gen-subset", "test"),
        *("--beam", "5", "--lenpen", "0.6", "--required-batch-size-multiple", "1"),
        *NO_PREFETCH_THREAD,
        *IN_PROCESS_LOADER,
        *extra,
        check=check,
    )


def generate_main(argv):
    """fairseq-generate's cli_main on ``argv``, logging to stdout as the command does."""
    from fairseq import options
    from fairseq_cli import generate

    parser = options.get_generation_parser()
    parser.add_argument("--arch", "-a", metavar="ARCH", default="wav2vec2")  # as cli_main adds it
    with fairseq_logging():
        generate.main(options.parse_args_and_arch(parser, input_args=argv))


@contextlib.contextmanager
def fairseq_logging():
    """fairseq's commands log through the root logger, which their basicConfig points at stdout at INFO
    where nothing else has: in this process, a handler of that format on stdout for the call (their
    basicConfig then leaves the root alone, and the records land in run_main's stdout)."""
    root, handler = logging.getLogger(), logging.StreamHandler(sys.stdout)
    handler.setFormatter(logging.Formatter("%(asctime)s | %(levelname)s | %(name)s | %(message)s", "%Y-%m-%d %H:%M:%S"))
    level = root.level
    root.addHandler(handler)
    root.setLevel(logging.INFO)
    try:
        yield
    finally:
        root.removeHandler(handler)
        root.setLevel(level)


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


def copy_task_files(raw: Path, sizes: dict, copy_splits=("train", "valid", "test")) -> Path:
    """raw/{split}.{src,tgt}: random strings of 3 to 8 hex digits, ``sizes[split]`` lines, the target a
    copy of the source in ``copy_splits`` and other random strings elsewhere; binarized into raw/bin."""
    import random

    rng = random.Random(0)

    def line():
        return " ".join(rng.choice("0123456789abcdef") for _ in range(rng.randint(3, 8)))

    raw.mkdir(parents=True, exist_ok=True)
    for split, size in sizes.items():
        sources = [line() for _ in range(size)]
        targets = sources if split in copy_splits else [line() for _ in range(size)]
        (raw / f"{split}.src").write_text("\n".join(sources) + "\n")
        (raw / f"{split}.tgt").write_text("\n".join(targets) + "\n")
    return fairseq_preprocess(raw, "src", "tgt")


# the train: section of tiny_config: the tiny Transformer's training (its arch and length are each test's own)
TINY_TRAIN = {
    "task": "translation",
    "share-all-embeddings": True,
    "optimizer": "adam",
    "lr": 0.005,
    "criterion": "label_smoothed_cross_entropy",
    "max-tokens": 512,
    **TINY,
}


def tiny_config(data_bin: Path, train=None, evaluate=None, **top) -> dict:
    """A phm-run config of a tiny run on a copy task that copy_task_files binarized into ``data_bin``: the training
    of TINY_TRAIN, BLEU of beam 2 against the test targets beside ``data_bin``. ``train`` and ``evaluate`` add to
    (or replace) its train: and evaluate: keys, ``top`` its top-level keys (seed, ...)."""
    return {
        "data": str(data_bin),
        **top,
        "train": {**TINY_TRAIN, **(train or {})},
        "evaluate": {
            "kind": "bleu",
            "reference": str(Path(data_bin).parent / "test.tgt"),
            "generate": {"gen-subset": "test", "beam": 2, "required-batch-size-multiple": 1},
            **(evaluate or {}),
        },
    }


# --- made once per test run, shared by the modules (and the pytest-xdist workers) that read them ----


@pytest.fixture(scope="session")
def run_tmp_path(request, tmp_path_factory) -> Path:
    """The temporary folder of the whole test run: under pytest-xdist, the one that holds each worker's own."""
    basetemp = tmp_path_factory.getbasetemp()
    # what xdist.is_xdist_worker asks, without importing xdist (the GPU run's pytest has none)
    return basetemp.parent if hasattr(request.config, "workerinput") else basetemp


def made_once(folder: Path, make) -> Path:
    """``folder`` as ``make(folder)`` fills it, once per test run however many pytest-xdist workers ask: the
    first makes it while the others wait on its lock, then each reads it. A marker written after ``make``
    returns says the folder is complete; one without it (its maker failed or was killed) is made afresh
    by the next that asks, so no test reads a half-made folder."""
    complete = folder.with_name(folder.name + ".complete")
    folder.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(folder.with_name(folder.name + ".lock")):
        if not complete.exists():
            shutil.rmtree(folder, ignore_errors=True)
            folder.mkdir()
            make(folder)
            complete.touch()
    return folder


def trained_once(save_dir: Path, data: Path, *extra) -> tuple:
    """``train(data, save_dir, *extra)`` once per test run (made_once): (save_dir, the training's output)."""

    def make(folder):
        result = train(data, folder, *extra)
        (folder / "train.log").write_text(result.stdout + result.stderr)

    made_once(save_dir, make)
    return save_dir, (save_dir / "train.log").read_text()


@pytest.fixture(scope="session")
def copy_task(run_tmp_path) -> Path:
    """A synthetic copy task (random digit strings), binarized with a joined dictionary."""
    import random

    def make(root):
        rng = random.Random(0)
        sizes = {"train": 3000, "valid": 100, "test": 64}
        for split, size in sizes.items():
            lines = [" ".join(rng.choice("0123456789abcdef") for _ in range(rng.randint(3, 8))) for _ in range(size)]
            for lang in ("src", "tgt"):
                (root / f"{split}.{lang}").write_text("\n".join(lines) + "\n")
        fairseq_preprocess(root, "src", "tgt")

    return made_once(run_tmp_path / "copy_task", make) / "bin"


@pytest.fixture(scope="session")
@slow
def multi30k_bpe(run_tmp_path) -> Path:
    """2,000 Multi30k en-de training pairs (100 valid, 100 test) through data-prep/multi30k.sh:
    sacremoses tokenization and 1,000 subword-nmt merges, as for a real model."""
    from phm_experiments.data import multi30k_sample

    def make(root):
        multi30k_sample(root / "src")
        script = REPO / "data-prep" / "multi30k.sh"
        run_command(
            "bash", script, "--src-dir", root / "src", "--out", root / "bin", "--bpe-size", "1000", "--workers", "1"
        )

    return made_once(run_tmp_path / "multi30k_bpe", make) / "bin"


class TrainedOnFirstUse(dict):
    """{key: train(key)}, each trained when a test first asks for it."""

    def __init__(self, train_one):
        super().__init__()
        self.train_one = train_one

    def __missing__(self, key):
        self[key] = self.train_one(key)
        return self[key]


@pytest.fixture(scope="session")
@slow
def copy_models(copy_task, run_tmp_path):
    """Each model of ARCHS trained by fairseq-train on copy_task, 300 updates unless ARCHS says more, with
    TensorBoard logs: {name: (checkpoint_best.pt, the training's output)}. Tests read these; a test that
    trains on writes into its own folder."""

    def train_one(name):
        folder = run_tmp_path / "copy_models" / name
        tensorboard = ("--tensorboard-logdir", folder / "tensorboard")
        save_dir, log = trained_once(folder, copy_task, "--max-update", "300", *ARCHS[name], *tensorboard)
        return save_dir / "checkpoint_best.pt", log

    return TrainedOnFirstUse(train_one)


@pytest.fixture(scope="session")
@slow
def multi30k_phm(multi30k_bpe, run_tmp_path):
    """A tiny PHM-Transformer (n=4, fused Q/K/V) trained by fairseq-train on multi30k_bpe for 300
    updates: (its checkpoint folder, the training's output). Tests read it; one that trains on copies it."""
    return trained_once(run_tmp_path / "multi30k_phm", multi30k_bpe, *ARCHS["phm-n4-fused"], "--max-update", "300")


# --- helpers of several test files ----------------------------------------------------------

PLUGIN = str(REPO / "phm_fairseq")  # fairseq's --user-dir
# the tiny Transformer of conftest.TINY as fairseq-train flags
TINY_FLAGS = [arg for key, value in TINY.items() for arg in (f"--{key}", str(value))]
TRAINING = [
    "--user-dir",
    PLUGIN,
    *NO_PREFETCH_THREAD,
    "--optimizer",
    "adam",
    "--lr",
    "0.005",
    "--lr-scheduler",
    "inverse_sqrt",
    "--warmup-updates",
    "50",
    "--criterion",
    "label_smoothed_cross_entropy",
    "--label-smoothing",
    "0.1",
    "--max-tokens",
    "2048",
    "--share-all-embeddings",
    "--dropout",
    "0.0",
    "--no-progress-bar",
    "--log-format",
    "simple",
    "--log-interval",
    "20",
    "--seed",
    "1",
    "--no-epoch-checkpoints",
]


ARCHS = {
    "phm-n4-fused": ["--arch", "phm_transformer_demo", "--phm-n", "4"],
    "phm-n2-algebra-separate": [
        "--arch",
        "phm_transformer_demo",
        "--phm-n",
        "2",
        "--phm-rule",
        "algebra-init",
        "--qkv-projection",
        "separate",
    ],
    # four softmaxes over Hamilton-product logits learn to copy more slowly: twice the lr (after 300 updates
    # at 0.005, 59% of the copies were exact, at 0.01 95%; AMD EPYC)
    "quaternion-attention": ["--arch", "quaternion_transformer_demo", "--quaternion-attention", "--lr", "0.01"],
    "quaternion-partial": ["--arch", "quaternion_transformer_partial_demo"],
    "dense-twin": ["--arch", "transformer_twin_demo"],
    # Compacter's options: one A for the whole model, rank-4 S_i (no fewer weights than full S_i in
    # the 32->32 maps at n=4: a warning says so); it learns to copy more slowly: twice the lr (after 300
    # updates at 0.005, 55% of the copies were exact, at 0.01 95%; AMD EPYC)
    "phm-shared-rule-rank4": [
        "--arch",
        "phm_transformer_demo",
        "--phm-n",
        "4",
        "--phm-shared-rule",
        "model",
        "--phm-rank",
        "4",
        "--lr",
        "0.01",
    ],
}


# phm-run's fairseq-train (phm_experiments.fairseq_train), for what plain fairseq-train cannot do
LAUNCHER = (sys.executable, "-m", "phm_experiments.fairseq_train")


def train(data, save_dir, *extra, check=True, launcher=False):
    """fairseq-train of the tiny Transformer with the tests' recipe (TRAINING), in this process (train_main);
    ``launcher``: phm-run's, in a process of its own."""
    options = [data, "--save-dir", save_dir, *TRAINING, *TINY_FLAGS]
    if launcher:
        return run_command(*LAUNCHER, *options, *extra, check=check)
    result = run_main(train_main, *options, *IN_PROCESS_LOADER, *extra, check=check)
    result.args = ["fairseq-train", *result.args]  # the command it stands for
    return result


def train_main(argv):
    """fairseq-train's cli_main on ``argv`` in this process, logging to stdout and warning on stderr as the
    command does. An error ends it as it ends the command: its traceback on stderr, exit status 1."""
    import traceback
    import warnings

    from fairseq import checkpoint_utils, options
    from fairseq.dataclass.utils import convert_namespace_to_omegaconf
    from fairseq.distributed import utils as distributed_utils
    from fairseq.logging import progress_bar

    with fairseq_logging(), warnings.catch_warnings():
        from fairseq_cli import train

        # fairseq keeps the best validation loss of the process on its functions (it decides checkpoint_best.pt
        # and early stopping): a new training starts without one, as a new process does
        for function, name in [(checkpoint_utils.save_checkpoint, "best"), (train.should_stop_early, "best")]:
            if hasattr(function, name):
                delattr(function, name)
        # each warning once, on stderr, as a new Python process shows it (pytest would collect it instead)
        warnings.simplefilter("default")
        warnings.showwarning = lambda message, category, filename, lineno, file=None, line=None: sys.stderr.write(
            warnings.formatwarning(message, category, filename, lineno, line)
        )
        try:
            args = options.parse_args_and_arch(options.get_training_parser(), input_args=argv)
            distributed_utils.call_main(convert_namespace_to_omegaconf(args), train.main)
        except Exception:
            traceback.print_exc()
            return 1
        finally:
            # fairseq keeps one TensorBoard writer per tag ("train", "valid") for the whole process and closes
            # them at its exit: closed (flushed) here, and dropped, so that the next training writes its own
            progress_bar._close_writers()
            progress_bar._tensorboard_writers.clear()


def build_as_fairseq_train(data, *extra):
    """The tiny Transformer that ``train(data, ..., *extra)`` would train, built in this process as
    fairseq-train builds it (parse_args_and_arch, setup_task, build_model): (model, task). Checks a
    refusal of the model's flags without starting a process."""
    from fairseq import options, tasks

    argv = [str(data), *TRAINING, *TINY_FLAGS, *map(str, extra)]
    args = options.parse_args_and_arch(options.get_training_parser(), input_args=argv)
    task = tasks.setup_task(args)
    return task.build_model(args), task


def losses(log: str, tag="train_inner") -> list:
    return [float(m) for m in re.findall(rf"\| {tag} \|.*?loss[= ]([\d.]+)", log)]


def hypotheses(log: str) -> dict:
    return {int(i): text for i, _, text in re.findall(r"^H-(\d+)\t(\S+)\t(.*)$", log, flags=re.M)}


def transformer_body(d, f, layers, n=1, fused=True, phm_ffn=True, quaternion=False, rank=None, shared_rules=None):
    """Parameters of encoder + decoder layers (no embeddings): weights k*d/n (rank R: R*(k+d)) + n^3
    per PHM layer, or n^3 once per shared rule (``shared_rules`` of them) instead."""

    def linear(i, o):
        if quaternion:
            return i * o // 4 + o
        weights = i * o // n if rank is None else rank * (i + o)
        return weights + (n**3 if n > 1 and shared_rules is None else 0) + o

    ffn = (linear(d, f) + linear(f, d)) if phm_ffn else (d * f + f + f * d + d)
    self_attention = (linear(d, 3 * d) if fused else 3 * linear(d, d)) + linear(d, d)
    cross_attention = 4 * linear(d, d)
    encoder = self_attention + ffn + 2 * 2 * d
    decoder = self_attention + cross_attention + ffn + 3 * 2 * d
    return layers * (encoder + decoder) + (shared_rules or 0) * n**3


def hamilton_product_eq_2_2(W, x):
    """W (x) x written out per eq. 2.2 of Zhang et al.; components are matrices and vectors."""
    import torch

    Qr, Qx, Qy, Qz = W
    Pr, Px, Py, Pz = x.chunk(4, dim=-1)
    mm = lambda Q, P: P @ Q.T  # noqa: E731  (batched row vectors, nn.Linear layout)
    return torch.cat(
        [
            mm(Qr, Pr) - mm(Qx, Px) - mm(Qy, Py) - mm(Qz, Pz),
            mm(Qx, Pr) + mm(Qr, Px) - mm(Qz, Py) + mm(Qy, Pz),
            mm(Qy, Pr) + mm(Qz, Px) + mm(Qr, Py) - mm(Qx, Pz),
            mm(Qz, Pr) - mm(Qy, Px) + mm(Qx, Py) + mm(Qr, Pz),
        ],
        dim=-1,
    )


@pytest.fixture
def ctrl_c_raises():
    """SIGINT raises KeyboardInterrupt in this process during the test, also where the process was
    started with SIGINT ignored (a background job of a non-interactive shell, nohup): Python then
    keeps it ignored, and a test of Ctrl-C would see nothing happen."""
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, previous)


def with_default_sigint():
    """Popen's preexec_fn: the child starts with SIGINT's default action, so that Python installs
    its Ctrl-C handler, whatever the test process inherited (see ctrl_c_raises)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
