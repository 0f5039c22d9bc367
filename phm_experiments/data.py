"""The data a run trains on: prepared already, or made by the config's `prepare` command, by one
phm-run at a time."""

from pathlib import Path

from . import commands
from .run_folder import LOCK, RunError, exclusive

REPO = Path(__file__).resolve().parent.parent


def is_prepared(data: Path) -> bool:
    """data-prep scripts write prep.json last; data binarized by hand has its dictionaries."""
    return (data / "prep.json").exists() or any(data.glob("dict*.txt")) or any(data.glob("*/dict*.txt"))


def data_lock(data: Path):
    """One `prepare` at a time for a data folder: an exclusive lock on .<name>.phm-run.lock beside it.
    Runs of several configs share their data, and two phm-runs side by side (two queues, two
    terminals) would otherwise prepare it at once into the same staging folder, and both fail; the second waits."""

    def wait(holder):
        print(f"== waiting for another phm-run to prepare {data} ({holder})", flush=True)

    return exclusive(data.parent / f".{data.name}{LOCK}", wait)


def prepare(run) -> str | None:
    """Runs the config's `prepare` command where the run's data is not there yet: the command run, or None."""
    data = Path(run.config.data)
    if is_prepared(data):
        return None
    if not run.config.prepare:
        raise RunError(f"{run.config.path}: {data} holds no fairseq data and the config has no `prepare` command")
    with data_lock(data):
        if is_prepared(data):  # by the phm-run it waited for
            return None
        command = run.fill(run.config.prepare)
        run.say(f"preparing {run.config.data}")
        commands.run_shell(command, run.folder.log("prepare"))
    return command


def multi30k_sample(folder: Path, train: int = 2000, valid: int = 100, test: int = 100) -> Path:
    """The first ``train``, ``valid`` and ``test`` pairs of the bundled Multi30k en-de, written to
    ``folder`` in its official layout (train/val/test_2016_flickr .en/.de .gz), for data-prep/multi30k.sh
    --src-dir: the small real corpus the tests and quick benchmarks train on."""
    import gzip

    folder.mkdir(parents=True, exist_ok=True)
    for name, size in (("train", train), ("val", valid), ("test_2016_flickr", test)):
        for lang in ("en", "de"):
            with gzip.open(REPO / "data" / "multi30k" / f"{name}.{lang}.gz", "rt", encoding="utf-8") as f:
                lines = f.read().splitlines()[:size]
            with gzip.open(folder / f"{name}.{lang}.gz", "wt", encoding="utf-8") as f:
                f.write("\n".join(lines) + "\n")
    return folder
