"""What phm-compress and phm-export share: reading a training checkpoint safely, checking --out
before any work, and writing so that --out is either complete or untouched."""

import contextlib
import os
import shutil
import signal
import tempfile
import threading

import torch


class RefusedInput(ValueError):
    """A command's input or --out that it refuses, with the message to show."""


def config_value(config, key):
    """A key of a fairseq configuration section (dict, DictConfig or Namespace)."""
    if config is None:
        return None
    return config.get(key) if hasattr(config, "get") else getattr(config, key, None)


def read_training_checkpoint(path: str, data=None) -> dict:
    """fairseq's (upgraded) state of the checkpoint at ``path``, once it is known to be a fairseq
    training checkpoint that loads without unsafe unpickling. ``data``: its data directory, if moved."""
    from fairseq import checkpoint_utils

    if not os.path.isfile(path):
        raise RefusedInput(f"{path}: no such checkpoint file")
    try:
        raw = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as error:  # not a torch file, or one that needs unsafe unpickling
        raise RefusedInput(
            f"{path}: not a checkpoint that can be loaded safely ({type(error).__name__}: "
            f"{str(error).splitlines()[0] if str(error) else ''})"
        ) from None
    if not isinstance(raw, dict) or "model" not in raw or (raw.get("cfg") is None and raw.get("args") is None):
        raise RefusedInput(f"{path}: not a fairseq training checkpoint (it has no model and configuration)")
    del raw
    return checkpoint_utils.load_checkpoint_to_cpu(path, arg_overrides={"data": data} if data else None)


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


def check_out(out: str, *, force: bool, inputs: dict, directory: bool = False) -> None:
    """Refuses, before any work, an --out that cannot be written or that would be overwritten without
    --force. ``inputs``: {path: what it is} of the command's input files, never to be overwritten;
    ``directory``: --out is a directory to write (otherwise a file)."""
    what = "the model directory" if directory else "the checkpoint file"
    if not out:
        raise RefusedInput(f"--out is empty: name {what} to write")
    if not directory and (out.endswith(os.sep) or os.path.isdir(out)):
        raise RefusedInput(f"--out {out} is a directory: name the checkpoint file to write")
    if directory and os.path.exists(out) and not os.path.isdir(out):
        raise RefusedInput(f"--out {out} is a file: name the directory to write the model into")
    parent = os.path.dirname(os.path.abspath(out))
    while not os.path.exists(parent):  # the nearest existing ancestor: where the directories would be made
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
    if directory and os.listdir(out) and not os.path.isfile(os.path.join(out, "model.bin")):
        # --force replaces a model directory, never a folder of other files
        raise RefusedInput(f"--out {out} is a directory that holds no CTranslate2 model (model.bin): not replaced")


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
