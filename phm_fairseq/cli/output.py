"""Output files of the plugin's commands (phm-compress): checked before the work, written whole or not at all."""

import os
import signal
from contextlib import contextmanager


class OutputError(ValueError):
    pass


def check_output_file(path: str, force: bool, source: str = None, source_is="the input", option="--out") -> None:
    """Refuses, before any work, an output path the command could not write or must not overwrite
    (``source``, the command's input file, described as ``source_is``, least of all)."""
    if not path or path.endswith(("/", os.sep)) or os.path.isdir(path):
        raise OutputError(f"{option} {path!r}: name the file to write (e.g. {option} phm_n4.pt)")
    existing = os.path.dirname(os.path.abspath(path))  # its folder, or the nearest one above that exists
    while not os.path.exists(existing):
        existing = os.path.dirname(existing)
    if not os.path.isdir(existing):
        raise OutputError(f"{option} {path}: {existing} is a file, not a folder")
    if os.path.exists(path):
        if not force:
            raise OutputError(f"{option} {path} exists: pass --force to overwrite it")
        if source and os.path.exists(source) and os.path.samefile(path, source):
            raise OutputError(f"{option} {path} is {source_is} itself: write elsewhere")


@contextmanager
def written_whole(path: str):
    """Yields a temporary file beside ``path`` to write; it becomes ``path`` when the block ends, and
    is removed on any error or interruption (Ctrl-C, and SIGTERM, which it turns into an exit), so
    that neither a half-written file nor a hidden temporary one is left."""
    folder = os.path.dirname(os.path.abspath(path))
    os.makedirs(folder, exist_ok=True)
    partial = os.path.join(folder, f".{os.path.basename(path)}.partial")
    previous = signal.signal(signal.SIGTERM, _exit_on_sigterm)
    try:
        yield partial
        os.replace(partial, path)
    finally:
        signal.signal(signal.SIGTERM, previous)
        if os.path.exists(partial):
            os.remove(partial)


def _exit_on_sigterm(signum, frame):
    raise SystemExit(128 + signum)
