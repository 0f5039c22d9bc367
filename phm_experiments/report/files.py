"""The files of a gap report (width.py, frontier.py, paired.py): OUT.json (the figures and the command that
made them), OUT.md and OUT.png, written after the figures are made, so that a refused input writes nothing."""

import json
import shlex
import sys
from pathlib import Path


def check_out(parser, out: Path) -> None:
    """--out: a path whose folders are folders (or can be made), or an error before any work."""
    for parent in out.parents:
        if parent.exists() and not parent.is_dir():
            parser.error(f"--out {out}: {parent} is a file, not a folder")


def write(module: str, argv, out: Path, result: dict, title: str, markdown, plot) -> None:
    """OUT.json, OUT.md (``markdown(title, result, command)``) and OUT.png (``plot(result, path, title)``)."""
    given = argv if argv is not None else sys.argv[1:]
    command = shlex.join(["python", "-m", module, *given])
    out.parent.mkdir(parents=True, exist_ok=True)
    Path(f"{out}.json").write_text(json.dumps({**result, "command": command}, indent=1) + "\n")
    Path(f"{out}.md").write_text(markdown(title, result, command))
    plot(result, Path(f"{out}.png"), title)
    print(f"wrote {out}.md, .json, .png")
