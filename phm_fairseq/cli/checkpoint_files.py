"""What the commands share about their files: reading a training checkpoint safely, what it holds (task,
architecture, data directory), loading its model, checking --out before any work, and writing so that
--out is either complete or untouched."""

import argparse
import contextlib
import os
import pickle
import re
import shutil
import signal
import tempfile
import threading

import torch

from .command import RefusedInput

# what a CTranslate2 model directory holds (ctranslate2.specs.model_spec's save: the model, its
# configuration, the vocabularies as shared_, source_ and target_vocabulary.json, numbered when several)
CTRANSLATE2_FILES = re.compile(r"model\.bin|config\.json|(shared|source|target)(_\d+)?_vocabulary\.json")


def config_value(config, key):
    """A key of a fairseq configuration section (dict, DictConfig or Namespace)."""
    if config is None:
        return None
    return config.get(key) if hasattr(config, "get") else getattr(config, key, None)


def task_and_arch(cfg) -> tuple:
    """The names of the task and of the model's architecture in a checkpoint's configuration, read as
    fairseq reads them (tasks.setup_task, models.build_model)."""
    task = config_value(cfg.task, "task")
    if not isinstance(task, str):  # a dataclass task's configuration names it _name
        task = config_value(cfg.task, "_name")
    arch = config_value(cfg.model, "_name") or config_value(cfg.model, "arch")
    return task, arch


def read_training_checkpoint(path: str, data=None) -> dict:
    """fairseq's (upgraded) state of the checkpoint at ``path``, once it is known to be a fairseq
    training checkpoint that loads without unsafe unpickling. ``data``: its data directory, if moved."""
    from fairseq import checkpoint_utils

    if not os.path.isfile(path):
        raise RefusedInput(f"{path}: no such checkpoint file{_checkpoints_beside(path)}")
    if os.path.getsize(path) == 0:
        raise RefusedInput(f"{path} is empty (0 bytes): not a checkpoint; was it still being written?")
    try:
        raw = torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as error:
        refused = re.search(r"Unsupported global: GLOBAL (\S+)", str(error))
        if refused:
            raise RefusedInput(
                f"{path}: not a checkpoint that can be loaded safely: it holds {refused.group(1)}, which torch's "
                f"safe loading (weights_only) refuses"
            ) from None
        raise RefusedInput(f"{path} cannot be read as a fairseq checkpoint (truncated, or not a checkpoint)") from None
    except Exception as error:  # a cut zip archive, a file of another kind: whatever torch fails on
        raise RefusedInput(
            f"{path} cannot be read as a fairseq checkpoint (truncated, or not a checkpoint): "
            f"{type(error).__name__}: {str(error).splitlines()[0] if str(error) else ''}"
        ) from None
    # fairseq's configuration: a plain dict (cfg), or a Namespace in checkpoints from before hydra (args)
    configured = isinstance(raw, dict) and (
        type(raw.get("cfg")) is dict or isinstance(raw.get("args"), argparse.Namespace)
    )
    if not configured or "model" not in raw:
        raise RefusedInput(f"{path}: not a fairseq training checkpoint (it has no model and configuration)")
    del raw
    return checkpoint_utils.load_checkpoint_to_cpu(path, arg_overrides={"data": data} if data else None)


def _checkpoints_beside(path: str) -> str:
    folder = os.path.dirname(path) or "."
    if not os.path.isdir(folder):
        return f"; there is no folder {folder}"
    found = sorted(name for name in os.listdir(folder) if name.endswith(".pt"))
    return f"; the .pt files in {folder}: {', '.join(found)}" if found else f"; {folder} has no .pt files"


def require_task(path: str, cfg, task_class, what: str) -> None:
    """Refuses a checkpoint whose task is not ``task_class`` or a subclass; ``what``: what the command takes."""
    from fairseq import tasks

    task, arch = task_and_arch(cfg)
    registered = tasks.TASK_REGISTRY.get(task)
    if registered is None or not issubclass(registered, task_class):
        raise RefusedInput(f"{path} holds a model for task {task!r} (arch {arch!r}); {what}")


def data_directory(cfg, given=None) -> str:
    """The binarized data that the checkpoint's dictionaries are read from: ``given`` (--data, if it moved
    since training) or the checkpoint's own, once it exists."""
    data = given or config_value(cfg.task, "data")
    if not data or not os.path.isdir(str(data).split(os.pathsep)[0]):
        raise RefusedInput(
            f"--data {data}: no such directory"
            if given
            else f"the checkpoint's data directory {data!r} does not exist here: pass --data DIR, the binarized data "
            f"(fairseq-preprocess's output) that the model was trained on"
        )
    return data


def translation_data_directory(cfg, given=None) -> str:
    """``data_directory``, once it holds the dictionaries of the checkpoint's language pair (fairseq's
    translation task infers the pair from the file names where the checkpoint names none)."""
    from fairseq.data.data_utils import infer_language_pair

    data = data_directory(cfg, given)
    folder = str(data).split(os.pathsep)[0]
    source, target = config_value(cfg.task, "source_lang"), config_value(cfg.task, "target_lang")
    if source is None or target is None:
        source, target = infer_language_pair(folder)
    missing = [
        name for name in (f"dict.{source}.txt", f"dict.{target}.txt") if not os.path.isfile(os.path.join(folder, name))
    ]
    if source is None or missing:
        where = f"--data {data}" if given else f"the checkpoint's data directory {data}"
        what = (
            f"has no {' or '.join(missing)}, the dictionaries of the model's language pair {source}-{target}"
            if source is not None
            else "holds no translation data (no fairseq-preprocess files that name a language pair)"
        )
        raise RefusedInput(
            f"{where} {what}: pass --data DIR, the binarized data (fairseq-preprocess's output) that the model "
            f"was trained on"
        )
    return data


def load_model(path: str, state: dict, data: str):
    """(model, cfg, task) of the checkpoint whose ``state`` read_training_checkpoint gave, its dictionaries
    read from ``data``."""
    from fairseq import checkpoint_utils

    try:
        models, cfg, task = checkpoint_utils.load_model_ensemble_and_task([path], state=state)
    except (RuntimeError, FileNotFoundError, ValueError) as error:  # e.g. the dictionaries of other data
        raise RefusedInput(f"{path} cannot be loaded with the data in {data}: {error}") from None
    return models[0], cfg, task


def check_out(out: str, *, force: bool, inputs: dict, directory: bool = False) -> None:
    """Refuses, before any work, an --out that cannot be written or that would be overwritten without
    --force. ``inputs``: {path: what it is} of the command's input files, never to be overwritten;
    ``directory``: --out is a CTranslate2 model directory (otherwise a file)."""
    what = "the model directory" if directory else "the checkpoint file"
    if not out:
        raise RefusedInput(f"--out is empty: name {what} to write")
    if not directory and (out.endswith(os.sep) or os.path.isdir(out)):
        raise RefusedInput(f"--out {out} is a directory: name the checkpoint file to write")
    if directory and os.path.exists(out) and not os.path.isdir(out):
        raise RefusedInput(f"--out {out} is a file: name the directory to write the model into")
    parent = os.path.abspath(out)
    while not os.path.exists(parent):  # the nearest existing ancestor: where the directories would be made
        if os.path.islink(parent):  # which makedirs cannot pass
            raise RefusedInput(
                f"--out {out}: {parent} is a symbolic link to {os.readlink(parent)}, which does not exist"
            )
        parent = os.path.dirname(parent)
    if parent == os.path.abspath(out):
        parent = os.path.dirname(parent)
    if not os.path.isdir(parent):
        raise RefusedInput(f"--out {out}: {parent} is a file, not a directory")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise RefusedInput(f"--out {out}: {parent} is not writable")
    if not os.path.exists(out):
        return
    if not force:
        raise RefusedInput(f"--out {out} exists: pass --force to overwrite it")
    for path, name in inputs.items():
        if os.path.exists(path) and os.path.samefile(out, path):
            raise RefusedInput(f"--out {out} is {name} itself: write elsewhere")
    if directory:  # --force replaces a model directory, never a file of someone else's
        names = os.listdir(out)
        if names and "model.bin" not in names:
            raise RefusedInput(f"--out {out} is a directory that holds no CTranslate2 model (model.bin): not replaced")
        others = sorted(name for name in names if not CTRANSLATE2_FILES.fullmatch(name))
        if others:
            raise RefusedInput(
                f"--out {out} holds {', '.join(others)} beside its CTranslate2 model: not replaced (--force "
                f"replaces a model's own files only: model.bin, config.json, the vocabularies); move "
                f"{'it' if len(others) == 1 else 'them'} or write elsewhere"
            )


@contextlib.contextmanager
def written_in_place(out: str):
    """Yields a path to write the output (a file or a directory) to; when the block ends normally it
    becomes ``out``, replacing what was there, otherwise (an error, Ctrl-C, SIGTERM: made an exit
    here, so that this cleans up) nothing under ``out`` changes and nothing written is left behind,
    not even the directories made for it."""
    out = os.path.abspath(out)
    made = None  # the outermost directory made for --out, removed again on failure
    parent = os.path.dirname(out)
    while not os.path.exists(parent):
        made, parent = parent, os.path.dirname(parent)
    os.makedirs(os.path.dirname(out), exist_ok=True)
    work = tempfile.mkdtemp(prefix=f".{os.path.basename(out)}.", suffix=".partial", dir=os.path.dirname(out))
    new, old = os.path.join(work, "new"), os.path.join(work, "old")
    done = False
    previous = signal.signal(signal.SIGTERM, _exit) if threading.current_thread() is threading.main_thread() else None
    try:
        yield new
        if os.path.isdir(out):  # a directory cannot be replaced in one rename: move the old one aside first
            os.replace(out, old)
        os.replace(new, out)
        done = True
    finally:
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)
        if not done and os.path.exists(old) and not os.path.exists(out):
            os.replace(old, out)
        shutil.rmtree(work, ignore_errors=True)
        if not done and made is not None:
            shutil.rmtree(made, ignore_errors=True)


def _exit(signum, frame):
    raise SystemExit(128 + signum)
