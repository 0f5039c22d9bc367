"""A data-prep script that cannot download says what to fetch and the options that take it instead."""

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def test_sva_offline_names_the_release_and_both_ways_around_the_download(tmp_path):
    offline = tmp_path / "bin"
    offline.mkdir()
    (offline / "curl").write_text('#!/bin/sh\necho "curl: (6) Could not resolve host" >&2\nexit 6\n')
    (offline / "curl").chmod(0o755)
    path = os.pathsep.join([str(offline), str(Path(sys.executable).parent), os.environ["PATH"]])
    result = subprocess.run(
        ["bash", str(REPO / "data-prep" / "sva.sh"), "--out", str(tmp_path / "sva")],
        cwd=tmp_path,
        env={**os.environ, "PATH": path},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode != 0
    error = result.stderr[result.stderr.index("sva: error:") :]
    for named in (
        "Fetch agr_50_mostcommon_10K.tsv.gz",
        "http://tallinzen.net/media/rnn_agreement/agr_50_mostcommon_10K.tsv.gz",
        "https://www.dropbox.com/s/5axdu3q9jkxzjy8/agr_50_mostcommon_10K.tsv.gz",
        "--src-dir DIR, the folder that holds it",
        "--input FILE",
    ):
        assert named in error, (named, error)
    assert not (tmp_path / "sva").exists()
