"""The output folder of every data-prep script: the contract of docs/data-prep.md.

    outdir.py plan [--force] OUT SCRIPT config.KEY=VALUE...   prints new, prepared or replace
    outdir.py stage STAGE SCRIPT                             makes STAGE (OUT.partial), marked as SCRIPT's
    outdir.py manifest STAGE KEY=VALUE...                    writes STAGE/prep.json, listing STAGE's files
    outdir.py commit STAGE OUT SCRIPT                        STAGE becomes OUT; the old OUT's files go

A script builds its output in OUT.partial and renames it to OUT once complete, so a failed run
leaves no OUT and an earlier OUT stays until its replacement is ready. An existing OUT is
replaced only when its prep.json names the script and every file in it is one that prep.json
lists: a folder the script did not make, or one where other files were put, is refused and left
as it is. No file that a script did not write is ever deleted. prep.json is written last; its
"config" holds the settings that made the folder: the same settings again find it prepared.

A refusal exits with status 3 and the reason, one line, on stdout (the shell side prints it as
the script's error). KEY=VALUE: a dotted KEY nests (splits.train=29000 gives {"splits":
{"train": 29000}}), a KEY ending in [] appends to a list, and a VALUE that parses as JSON (a
number, true, null, an object) is taken as that, any other as a string.
"""

import argparse
import json
import os
import shutil
import sys
from importlib import metadata
from pathlib import Path

MARK = ".data-prep-partial"  # in OUT.partial: the script that is building it
MANIFEST = "prep.json"


class Refusal(Exception):
    pass


def fields(items):
    out = {}
    for item in items:
        key, _, value = item.partition("=")
        try:
            value = json.loads(value)
        except json.JSONDecodeError:
            pass
        *parents, leaf = key.split(".")
        node = out
        for parent in parents:
            node = node.setdefault(parent, {})
        if leaf.endswith("[]"):
            node.setdefault(leaf[:-2], []).append(value)
        else:
            node[leaf] = value
    return out


def read_manifest(folder):
    path = folder / MANIFEST
    if not path.is_file():
        return None
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as error:
        raise Refusal(f"{path} cannot be read ({error}): {folder} is left as it is; choose another --out") from None


def maker(manifest):
    """The script that wrote a prep.json; those written before prep.json named it had "dataset"."""
    if manifest.get("script"):
        return manifest["script"]
    return f"data-prep/{manifest['dataset']}.sh" if manifest.get("dataset") else "an unknown script"


def entries(folder):
    """Every file and folder below ``folder``, as relative POSIX paths."""
    found = set()
    for root, dirs, files in os.walk(folder):
        base = Path(root).relative_to(folder)
        found.update((base / name).as_posix() for name in dirs + files)
    return found


def owned_files(out, script):
    """The files of ``out`` that ``script`` may replace; Refusal unless all of ``out`` is that."""
    if out.is_symlink() or not out.is_dir():
        raise Refusal(f"{out} exists and is not a folder: choose another --out")
    manifest = read_manifest(out)
    if manifest is None:
        raise Refusal(
            f"{out} exists, is not empty and was not made by a data-prep script (no {MANIFEST}): "
            "it is left as it is; choose another --out"
        )
    if maker(manifest) != script:
        raise Refusal(
            f"{out} was made by {maker(manifest)} (see its {MANIFEST}), not by {script}: "
            "it is left as it is; choose another --out"
        )
    if "files" not in manifest:
        raise Refusal(
            f"{out} was made by an earlier version of {script}, whose {MANIFEST} does not list the files "
            "it wrote: remove the folder yourself, or choose another --out"
        )
    listed = set(manifest["files"])
    allowed = listed | {parent.as_posix() for name in listed for parent in Path(name).parents} - {"."}
    foreign = sorted(entries(out) - allowed)
    if foreign:
        shown = ", ".join(foreign[:5]) + (f" and {len(foreign) - 5} more" if len(foreign) > 5 else "")
        raise Refusal(
            f"{out} holds files that {script} did not write ({shown}): nothing was changed; "
            "move them elsewhere, or choose another --out"
        )
    return manifest, sorted(listed)


def plan(out, script, config, force):
    if not out.exists() and not out.is_symlink():
        return "new"
    if out.is_dir() and not out.is_symlink() and not any(out.iterdir()):
        return "new"
    manifest, _ = owned_files(out, script)
    if manifest.get("config") == config and not force:
        return "prepared"
    return "replace"


def stage(path, script):
    mark = path / MARK
    if path.exists() or path.is_symlink():
        if not (mark.is_file() and mark.read_text(encoding="utf-8").strip() == script):
            raise Refusal(
                f"{path} exists and is not an unfinished output of {script}: it is left as it is; "
                "remove it yourself, or choose another --out"
            )
        shutil.rmtree(path)
    path.mkdir(parents=True)
    mark.write_text(script + "\n", encoding="utf-8")


def versions():
    found = {"python": sys.version.split()[0]}
    for dist in ("sacremoses", "subword-nmt", "sentencepiece", "ve-fairseq", "fairseq"):
        try:
            found[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            pass
    return found


def manifest(path, items):
    data = fields(items)
    data["versions"] = versions()
    files = {name for name in entries(path) if (path / name).is_file() or (path / name).is_symlink()}
    data["files"] = sorted(files - {MARK} | {MANIFEST})
    (path / MANIFEST).write_text(json.dumps(data, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")


def commit(path, out, script):
    mark = path / MARK
    if not mark.is_file() or mark.read_text(encoding="utf-8").strip() != script:
        raise Refusal(f"{path} is not an unfinished output of {script}")
    if not (path / MANIFEST).is_file():
        raise Refusal(f"{path} has no {MANIFEST}: it is not complete")
    old = listed = None
    if out.exists() or out.is_symlink():
        if out.is_dir() and not out.is_symlink() and not any(out.iterdir()):
            out.rmdir()
        else:
            _, listed = owned_files(out, script)
            old = out.with_name(f"{out.name}.replaced-{os.getpid()}")
            out.rename(old)
    else:
        out.parent.mkdir(parents=True, exist_ok=True)
    mark.unlink()
    path.rename(out)
    if old is not None:  # only the files that the old prep.json lists, then the folders they leave empty
        for name in listed:
            (old / name).unlink(missing_ok=True)
        for name in sorted(entries(old), key=lambda n: n.count("/"), reverse=True):
            if (old / name).is_dir() and not any((old / name).iterdir()):
                (old / name).rmdir()
        if any(old.iterdir()):
            print(f"warning: {old} kept: it holds files written while the script ran", file=sys.stderr)
        else:
            old.rmdir()


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("plan")
    p.add_argument("out", type=Path)
    p.add_argument("script")
    p.add_argument("--force", action="store_true")
    p.add_argument("config", nargs="*")
    p = sub.add_parser("stage")
    p.add_argument("path", type=Path)
    p.add_argument("script")
    p = sub.add_parser("manifest")
    p.add_argument("path", type=Path)
    p.add_argument("fields", nargs="*")
    p = sub.add_parser("commit")
    p.add_argument("path", type=Path)
    p.add_argument("out", type=Path)
    p.add_argument("script")
    args = parser.parse_args()
    try:
        if args.command == "plan":
            print(plan(args.out, args.script, fields(args.config).get("config", {}), args.force))
        elif args.command == "stage":
            stage(args.path, args.script)
        elif args.command == "manifest":
            manifest(args.path, args.fields)
        else:
            commit(args.path, args.out, args.script)
    except Refusal as refusal:
        print(refusal)
        sys.exit(3)


if __name__ == "__main__":
    main()
