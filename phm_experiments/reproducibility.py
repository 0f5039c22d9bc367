"""Does this CPU train a seed to the same bits as the CPUs of the committed reference?

    python -m phm_experiments.reproducibility check   # this CPU against results/reproducibility/reference.json
    python -m phm_experiments.reproducibility add     # this CPU's trails into it (a CPU not listed yet)

Each model of MODELS (the demo PHM n=4 and its dense twin) trains UPDATES updates of seed 1 on 2,000
pairs of the bundled Multi30k (prepare()), through phm-run's own launcher, with the kernels pinned
(kernels.py) at one thread, in a process of its own (the pins must be set before torch loads). After
every update its trail keeps the loss (exactly: float.hex) and the SHA-256 of every parameter, so a
CPU that differs is told the first update where it does, and whether the loss (the forward pass)
already differed there or only the parameters (backward, optimizer).

The reference holds one entry per distinct set of trails with the CPUs that produced it: one entry
listing two kinds of CPU means the pins give the same bits on both. A CPU is named by its model and
instruction sets (machine()): the same "AMD EPYC" comes with and without AVX-512.
"""

import argparse
import datetime
import hashlib
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from .data import multi30k_sample
from .kernels import kernel_environment, pinned_environment

REPO = Path(__file__).resolve().parent.parent
REFERENCE = REPO / "results" / "reproducibility" / "reference.json"
UPDATES = 30
MODELS = {
    "phm_n4": ["--arch", "phm_transformer_demo", "--phm-n", "4", "--lr", "0.008"],
    "transformer": ["--arch", "transformer_twin_demo", "--lr", "0.004"],
}
# the converged recipe (configs/converged/multi30k) but for batches of 1,024 tokens, without validation
RECIPE = [
    *("--task", "translation", "--source-lang", "en", "--target-lang", "de", "--share-all-embeddings"),
    *("--optimizer", "adam", "--adam-betas", "(0.9, 0.98)", "--weight-decay", "0.0001"),
    *("--lr-scheduler", "inverse_sqrt", "--warmup-updates", "200", "--warmup-init-lr", "1e-07"),
    *("--dropout", "0.1", "--criterion", "label_smoothed_cross_entropy", "--label-smoothing", "0.1"),
    *("--max-tokens", "1024", "--max-update", str(UPDATES), "--seed", "1", "--cpu", "--num-workers", "0"),
    *("--no-save", "--disable-validation", "--log-format", "json", "--log-interval", "10", "--no-progress-bar"),
]


# what tells the entries of the reference apart in check's lines (the rest of the pins are alike)
LABEL_PINS = ("MKL_CBWR", "PHM_EXACT_SQRT")


def machine() -> str:
    """This CPU as a reference names it: its model and the instruction sets that choose kernels."""
    model, flags = "unknown CPU", set()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            key, _, value = line.partition(":")
            if key.strip() == "model name":
                model = value.strip()
            elif key.strip() == "flags":
                flags = set(value.split())
    except OSError:
        pass
    isa = "AVX-512" if "avx512f" in flags else "AVX2" if "avx2" in flags else "no AVX2"
    return f"{model} ({isa}{', AMX' if 'amx_tile' in flags else ''})"


def prepare(folder: Path) -> Path:
    """The reference's data in ``folder``: the first 2,000 / 100 / 100 pairs of the bundled Multi30k
    through data-prep/multi30k.sh with 1,000 BPE merges (the tests' multi30k_bpe fixture); its bin/."""
    if not (folder / "bin" / "dict.en.txt").exists():
        multi30k_sample(folder / "src")
        script = REPO / "data-prep" / "multi30k.sh"
        command = ["bash", str(script), "--src-dir", str(folder / "src"), "--out", str(folder / "bin")]
        subprocess.run([*command, "--bpe-size", "1000", "--workers", "1"], check=True, capture_output=True)
    return folder / "bin"


def data_sha256(data: Path) -> str:
    """Of the dictionaries and the binarised training set: two CPUs compare only on the same data."""
    digest = hashlib.sha256()
    for name in (
        "dict.en.txt",
        "dict.de.txt",
        *(f"train.en-de.{lang}.{ext}" for lang in ("en", "de") for ext in ("bin", "idx")),
    ):
        digest.update((Path(data) / name).read_bytes())
    return digest.hexdigest()


def parameters_sha256(model) -> str:
    digest = hashlib.sha256()
    for name, tensor in sorted(model.state_dict().items()):
        digest.update(name.encode())
        digest.update(tensor.detach().contiguous().cpu().numpy().tobytes())
    return digest.hexdigest()


def train_trail(data: Path, model: str, out: Path) -> None:
    """In this process (pinned by its caller): UPDATES updates of ``model``, its trail written to ``out``."""
    from fairseq.trainer import Trainer

    from . import fairseq_train
    from .commands import fairseq_train_command

    trail = []
    train_step = Trainer.train_step

    def train_step_with_trail(self, samples, raise_oom=False):
        logging_output = train_step(self, samples, raise_oom)
        trail.append({"loss": float(logging_output["loss"]).hex(), "parameters": parameters_sha256(self.model)})
        return logging_output

    Trainer.train_step = train_step_with_trail
    with tempfile.TemporaryDirectory() as save_dir:
        command = fairseq_train_command(data, *RECIPE, *MODELS[model], "--save-dir", save_dir)
        fairseq_train.main(command[3:])  # after `python -m phm_experiments.fairseq_train`
    Path(out).write_text(json.dumps(trail))


def trails(data: Path) -> dict:
    """Every model's trail on this CPU, each trained in a process of its own with the kernels pinned."""
    environ = {**os.environ, **pinned_environment(1)}
    result = {}
    with tempfile.TemporaryDirectory() as folder:
        for model in MODELS:
            out = Path(folder) / f"{model}.json"
            command = [sys.executable, "-m", "phm_experiments.reproducibility", "_trail", str(data), model, str(out)]
            finished = subprocess.run(command, env=environ, capture_output=True, text=True)
            if finished.returncode:
                raise RuntimeError(f"the {model} training failed:\n{finished.stderr[-3000:]}")
            result[model] = json.loads(out.read_text())
            if len(result[model]) != UPDATES:
                raise RuntimeError(f"the {model} training made {len(result[model])} updates, not {UPDATES}")
    return result


def measure(data: Path) -> dict:
    """This CPU's entry of a reference: its trails, with what made them."""
    import torch

    from .provenance import git_commit

    return {
        "machines": [machine()],
        "date": datetime.date.today().isoformat(),
        "git_commit": git_commit(ignore=(str(REFERENCE.relative_to(REPO)),)),  # adding an entry changes it
        "torch": torch.__version__,
        "kernels": kernel_environment({**os.environ, **pinned_environment(1)}),
        "data_sha256": data_sha256(data),
        "trails": trails(data),
    }


def first_difference(trails: dict, reference: dict):
    """None where ``trails`` are the reference's bit for bit; else where they first part, in words."""
    for model, trail in reference.items():
        for update, (mine, theirs) in enumerate(zip(trails[model], trail), 1):
            if mine != theirs:
                part = (
                    "the loss already differs"
                    if mine["loss"] != theirs["loss"]
                    else "the loss is the same, the parameters differ"
                )
                return (
                    f"{model} differs from update {update} of {len(trail)}: {part} "
                    f"(loss {float.fromhex(mine['loss'])!r} against {float.fromhex(theirs['loss'])!r})"
                )
    return None


def compare(entry: dict, reference: list, any_pins: bool = False) -> list:
    """For every entry of ``reference``: (its machines, None where ``entry`` matches it bit for bit, else
    what differs first). Trails of other pins are not compared unless ``any_pins`` (to see what a pin moves)."""
    results = []
    for known in reference:
        if known["data_sha256"] != entry["data_sha256"]:
            why = "other training data (data-prep, sacremoses or subword-nmt differ): the bits cannot be compared"
        elif known["kernels"] != entry["kernels"] and not any_pins:
            mine, theirs = entry["kernels"], known["kernels"]
            differ = [
                f"{name}={mine.get(name, 'unset')} here, {theirs.get(name, 'unset')} there"
                for name in sorted(set(mine) | set(theirs))
                if mine.get(name) != theirs.get(name)
            ]
            why = f"other pins ({'; '.join(differ)}): not compared"
        else:
            why = first_difference(entry["trails"], known["trails"])
        results.append((known["machines"], why))
    return results


def own_entry(entry: dict, reference: list):
    """The reference's entry that lists this CPU with ``entry``'s pins (what this CPU must reproduce), or None."""
    mine = (known for known in reference if machine() in known["machines"] and known["kernels"] == entry["kernels"])
    return next(mine, None)


def read_reference(path: Path = REFERENCE) -> list:
    return json.loads(Path(path).read_text())["references"] if Path(path).exists() else []


def write_reference(references: list, path: Path = REFERENCE) -> None:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    text = {
        "what": f"{UPDATES} updates of seed 1 per model, kernels pinned at one thread: the loss (float.hex) and "
        "the parameters' SHA-256 after each update. One entry per distinct set of trails, with the CPUs that "
        "produced it (python -m phm_experiments.reproducibility).",
        "models": {model: " ".join(arguments) for model, arguments in MODELS.items()},
        "recipe": " ".join(RECIPE),
        "references": references,
    }
    path.write_text(json.dumps(text, indent=1) + "\n")


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["_trail"]:  # the training process of trails()
        train_trail(Path(argv[1]), argv[2], Path(argv[3]))
        return 0
    parser = argparse.ArgumentParser(
        prog="python -m phm_experiments.reproducibility", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("action", choices=["check", "add"])
    parser.add_argument("--reference", type=Path, default=REFERENCE)
    parser.add_argument("--work", type=Path, default=Path("work/reproducibility"), help="where its data is prepared")
    parser.add_argument(
        "--any-pins",
        action="store_true",
        help="check: compare with entries of other pins too (e.g. MKL_CBWR=COMPATIBLE ... check --any-pins: "
        "whether that variable moves the bits)",
    )
    args = parser.parse_args(argv)
    if args.action == "add" and args.any_pins:
        parser.error("--any-pins is for check: an entry is added with the pins it was made with")
    entry = measure(prepare(args.work))
    references = read_reference(args.reference)
    results = compare(entry, references, any_pins=args.any_pins)
    for known, (machines, why) in zip(references, results):
        pins = ", ".join(f"{name}={known['kernels'][name]}" for name in LABEL_PINS if name in known["kernels"])
        print(f"against {' / '.join(machines)} ({pins}): {why or 'the same bits at every update'}")
    if args.action == "add":
        same = [known for known, (_, why) in zip(references, results) if why is None]
        if same:
            if machine() not in same[0]["machines"]:
                same[0]["machines"].append(machine())
        else:
            references.append(entry)
        write_reference(references, args.reference)
        print(f"{machine()}: {'listed with the entry it reproduces' if same else 'a new entry'} in {args.reference}")
        return 0
    if not results:
        print(f"no reference at {args.reference}: make it with `add`")
        return 1
    own = own_entry(entry, references)
    if own is not None:  # this CPU made or reproduced an entry of these pins: it must again
        return 0 if compare(entry, [own])[0][1] is None else 1
    return 0 if any(why is None for _, why in results) else 1


if __name__ == "__main__":
    sys.exit(main())
