"""The data part: Multi30k en-de prepared by data-prep/multi30k.sh, from the bundled data/multi30k (the
dry run: from its first lines)."""

import gzip
import json
from pathlib import Path

from .context import Context
from .paths import REPO

SLICE = {"train": 1000, "val": 50, "test_2016_flickr": 50}  # the dry run's lines of each split


def run(ctx: Context, deadline: float) -> dict:
    if (ctx.data / "prep.json").is_file():  # prepared by an earlier command on this (warm) machine
        return {**summary(ctx), "reused": True}
    source, extra = REPO / "data" / "multi30k", []
    if ctx.mode.tiny:
        source, extra = ctx.work / "multi30k-slice", ["--bpe-size", "1000", "--workers", "1"]
        slice_multi30k(source)
    command = ["bash", "data-prep/multi30k.sh", "--src-dir", source, "--out", ctx.data, *extra]
    if ctx.processes.run(command, ctx.log("data"), deadline):
        raise RuntimeError(f"data-prep/multi30k.sh failed (see {ctx.log('data').name})")
    return summary(ctx)


def summary(ctx: Context) -> dict:
    prep = json.loads((ctx.data / "prep.json").read_text())
    return {"data": str(ctx.data.relative_to(REPO) if ctx.data.is_relative_to(REPO) else ctx.data),
            "seconds_to_prepare": prep.get("seconds"), "splits": prep.get("splits")}  # fmt: skip


def slice_multi30k(folder: Path) -> None:
    """The first lines of the bundled Multi30k en-de (gzip files as in data/multi30k), for the dry run."""
    folder.mkdir(parents=True, exist_ok=True)
    for name, count in SLICE.items():
        for lang in ("en", "de"):
            with gzip.open(REPO / "data" / "multi30k" / f"{name}.{lang}.gz", "rt", encoding="utf-8") as source:
                lines = [next(source) for _ in range(count)]
            with gzip.open(folder / f"{name}.{lang}.gz", "wt", encoding="utf-8") as target:
                target.writelines(lines)
