"""The NLI task end to end: data-prep on real corpora, the task, the models, training, phm-evaluate."""

import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
import torch
import yaml
from conftest import NO_PREFETCH_THREAD, classes_in_checkpoint, run_main, slow

import phm_fairseq  # noqa: F401  (registers the task, models, criterion)
from phm_fairseq.cli import evaluate as phm_evaluate
from phm_fairseq.cli import params as phm_params

REPO = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent  # fairseq-train, phm-evaluate of this environment
TEST_PAIRS = 333  # odd, and not a multiple of any batch size used below
SMALL_MODEL = ["--encoder-embed-dim", "40", "--encoder-hidden-size", "40", "--classifier-hidden-dim", "40"]


def run(cmd, **env):
    env = {**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ['PATH']}", "OMP_NUM_THREADS": "1", **env}
    return subprocess.run([str(c) for c in cmd], capture_output=True, text=True, env=env, cwd=REPO)


def sick_copy(shared_data, folder: Path, trial_pairs=TEST_PAIRS, edit=None) -> Path:
    """SICK_train.txt and the first ``trial_pairs`` pairs of SICK_trial.txt, optionally edited."""
    folder.mkdir(parents=True)
    shutil.copy(shared_data / "sick" / "SICK_train.txt", folder)
    trial = (shared_data / "sick" / "SICK_trial.txt").read_text().splitlines(keepends=True)
    (folder / "SICK_trial.txt").write_text("".join(trial[: trial_pairs + 1]))
    if edit:
        lines = (folder / "SICK_train.txt").read_text().splitlines(keepends=True)
        for number, line in edit.items():
            lines[number - 1] = line
        (folder / "SICK_train.txt").write_text("".join(lines))
    return folder


@pytest.fixture(scope="module")
@slow
def sick_data(shared_data, tmp_path_factory):
    """data-bin made by data-prep/sick.sh --trial-as-test from the real SICK files."""
    root = tmp_path_factory.mktemp("sick")
    src = sick_copy(shared_data, root / "src")
    out = run(
        ["bash", "data-prep/sick.sh", "--trial-as-test", "--src-dir", src, "--out", root / "data", "--workers", "1"]
    )
    assert out.returncode == 0, out.stderr
    return root / "data", out.stderr


def test_data_prep_sick_offline(sick_data):
    data, log = sick_data
    assert (data / "labels.txt").read_text().split() == ["entailment", "neutral", "contradiction"]
    counts = {split: len((data / f"{split}.label").read_text().splitlines()) for split in ("train", "valid", "test")}
    assert counts == {"train": 4000, "valid": 500, "test": TEST_PAIRS}
    assert (data / "premise" / "dict.txt").read_bytes() == (data / "hypothesis" / "dict.txt").read_bytes()
    assert "500 held out (seed 1)" in log and "skipped by rule: 0 empty premise or hypothesis" in log


@pytest.mark.slow
def test_data_prep_snli_counts_what_it_skips_by_rule(shared_data, tmp_path):
    rows = (shared_data / "snli" / "snli_1.0_dev.tok.tsv").read_text().splitlines(keepends=True)
    header, rows = rows[0], rows[1:]
    src = tmp_path / "src"
    src.mkdir()
    for name, part in (("train", rows[:400]), ("dev", rows[400:450]), ("test", rows[450:501])):
        if name == "train":  # SNLI's rule: pairs without a gold label ('-') are left out, and counted
            part = ["-\t" + line.split("\t", 1)[1] if i in (3, 17) else line for i, line in enumerate(part)]
        (src / f"snli_1.0_{name}.tok.tsv").write_text(header + "".join(part))
    with zipfile.ZipFile(src / "snli_1.0.zip", "w") as archive:  # --src-dir with the release's archive in it
        for file in sorted(src.glob("*.tsv")):
            archive.write(file, f"snli_1.0/{file.name}")
            file.unlink()
    out = run(["bash", "data-prep/snli.sh", "--src-dir", src, "--out", tmp_path / "data", "--workers", "1"])
    assert out.returncode == 0, out.stderr
    assert "398 examples" in out.stderr and "skipped by rule: 2 no gold label" in out.stderr
    assert len((tmp_path / "data" / "train.label").read_text().splitlines()) == 398
    assert len((tmp_path / "data" / "test.label").read_text().splitlines()) == 51


def snli_rows(shared_data, count):
    rows = (shared_data / "snli" / "snli_1.0_dev.tok.tsv").read_text().splitlines()[1 : count + 1]
    return [row.split("\t") for row in rows]


@pytest.mark.slow
def test_data_prep_multinli_jsonl_with_matched_and_mismatched_tests(shared_data, tmp_path):
    src = tmp_path / "src"
    src.mkdir()
    rows = snli_rows(shared_data, 260)
    for name, part in (("train", rows[:200]), ("dev_matched", rows[200:231]), ("dev_mismatched", rows[231:260])):
        records = [
            {
                "gold_label": "-" if (name, i) == ("dev_mismatched", 0) else label,
                "sentence1_binary_parse": f"( ( {premise} ) )",
                "sentence2_binary_parse": f"( {hypothesis} )",
            }
            for i, (label, premise, hypothesis) in enumerate(part)
        ]
        (src / f"multinli_1.0_{name}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    out = run(
        ["bash", "data-prep/mnli.sh", "--src-dir", src, "--out", tmp_path / "data", "--workers", "1", "--keep-tmp"]
    )
    assert out.returncode == 0, out.stderr
    data = tmp_path / "data"
    counts = {
        split: len((data / f"{split}.label").read_text().splitlines())
        for split in ("train", "valid", "test", "test_mismatched")
    }
    assert counts == {"train": 200, "valid": 31, "test": 31, "test_mismatched": 28}
    assert (data / "premise" / "test_mismatched.bin").is_file() and not (data / "premise" / "test1.bin").exists()
    assert (data / "tmp" / "train.premise").read_text().splitlines()[0] == rows[0][1]  # parse brackets gone


@pytest.mark.slow
@pytest.mark.parametrize("fmt", ["scitail-tsv", "dnli-json", "quora-tsv"])
def test_release_formats_and_their_labels(shared_data, tmp_path, fmt):
    rows = snli_rows(shared_data, 6)
    raw = {  # each corpus's own label names for entailment / neutral / contradiction
        "scitail-tsv": ("entails", "neutral", None),
        "dnli-json": ("positive", "neutral", "negative"),
        "quora-tsv": ("1", "0", None),
    }[fmt]
    rows = [(raw[("entailment", "neutral", "contradiction").index(label)] or raw[1], p, h) for label, p, h in rows]
    if fmt == "scitail-tsv":
        text = "".join(f"{p}\t{h}\t{label}\n" for label, p, h in rows)
    elif fmt == "dnli-json":
        text = json.dumps([{"label": label, "sentence1": p, "sentence2": h, "dtype": "x"} for label, p, h in rows])
    else:
        text = "".join(f"{label}\t{p}\t{h}\t{i}\n" for i, (label, p, h) in enumerate(rows))
    (tmp_path / "in").write_text(text)
    out = run([sys.executable, "data-prep/nli_to_tsv.py", "--format", fmt, tmp_path / "in", tmp_path / "out.tsv"])
    assert out.returncode == 0, out.stderr
    labels = run([sys.executable, "data-prep/nli_to_tsv.py", "--labels", fmt]).stdout.split()
    written = [line.split("\t") for line in (tmp_path / "out.tsv").read_text().splitlines()]
    assert len(written) == 6 and all(label in labels for label, _, _ in written)
    mapping = {
        "scitail-tsv": {"entails": "entailment", "neutral": "neutral"},
        "dnli-json": {"positive": "entailment", "neutral": "neutral", "negative": "contradiction"},
        "quora-tsv": {"1": "paraphrase", "0": "not_paraphrase"},
    }[fmt]
    assert [w[0] for w in written] == [mapping[r[0]] for r in rows]


@pytest.mark.parametrize(
    "line,message",
    [
        ("7\tA man is playing a guitar\tA man plays\n", "line 7: expected 5 tab-separated fields, found 3"),
        ("9\tA man is playing\tA man plays\t4.0\tMAYBE\n", "line 9: unknown label 'MAYBE'"),
    ],
    ids=["malformed", "unknown-label"],
)
def test_data_prep_rejects_bad_lines_with_their_number(shared_data, tmp_path, line, message):
    number = int(line.split("\t")[0])
    src = sick_copy(shared_data, tmp_path / "src", edit={number: line})
    out = run(["bash", "data-prep/sick.sh", "--trial-as-test", "--src-dir", src, "--out", tmp_path / "data"])
    assert out.returncode != 0
    assert message in out.stderr and "SICK_train.txt" in out.stderr
    assert not (tmp_path / "data").exists()  # nothing half-made


def test_data_prep_without_network_says_how_to_work_offline(tmp_path):
    refused = "http://127.0.0.1:9"  # a proxy that refuses at once: no download is attempted for real
    out = run(
        ["bash", "data-prep/scitail.sh", "--out", tmp_path / "data", "--download-dir", tmp_path / "dl"],
        http_proxy=refused,
        https_proxy=refused,
        HTTP_PROXY=refused,
        HTTPS_PROXY=refused,
    )
    assert out.returncode != 0
    assert (
        "could not download" in out.stderr and "--src-dir DIR" in out.stderr and "scitail_1.0_train.tsv" in out.stderr
    )


# --- data-prep under hostile input (issue 13): the output contract, lines, empty files, bytes ---


def snli_folder(shared_data, folder, sizes=(("train", 300), ("dev", 40), ("test", 30)), edit=None):
    """snli_1.0_{train,dev,test}.tok.tsv from the real SNLI dev rows; ``edit`` maps a split name
    to a function of (header, rows) that returns the file's bytes."""
    header, *rows = (shared_data / "snli" / "snli_1.0_dev.tok.tsv").read_text().split("\n")
    folder.mkdir(parents=True)
    start = 0
    for name, size in sizes:
        part = rows[start : start + size]
        start += size
        data = (
            edit[name](header, part)
            if edit and name in edit
            else "".join(line + "\n" for line in [header, *part]).encode()
        )
        (folder / f"snli_1.0_{name}.tok.tsv").write_bytes(data)
    return folder


def test_data_prep_never_deletes_a_folder_it_did_not_make(shared_data, tmp_path):
    """Issue 13.1: sick.sh --dest FOLDER exited 0 and the other files in FOLDER were gone."""
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "notes.txt").write_text("keep me")
    src = sick_copy(shared_data, tmp_path / "src")
    out = run(["bash", "data-prep/sick.sh", "--trial-as-test", "--src-dir", src, "--out", mine])
    assert out.returncode != 0
    assert f"{mine} exists, is not empty and was not made by a data-prep script (no prep.json)" in out.stderr
    assert [p.name for p in mine.iterdir()] == ["notes.txt"] and (mine / "notes.txt").read_text() == "keep me"
    assert not (tmp_path / "mine.partial").exists()


def test_data_prep_refuses_unknown_options_with_the_usage(shared_data, tmp_path):
    """Issue 13.1: snli.sh --dset X was ignored silently. --dest, the old name of --out, is refused
    too, with the new name."""
    src = snli_folder(shared_data, tmp_path / "src")
    out = run(["bash", "data-prep/snli.sh", "--dset", "X", "--dest", tmp_path / "data", "--src-dir", src])
    assert out.returncode == 2
    assert "snli: error: unknown option '--dset' (see --help)\nusage: data-prep/snli.sh [--src-dir DIR]" in out.stderr
    out = run(["bash", "data-prep/sick.sh", "--dest", tmp_path / "data"])
    assert out.returncode == 2 and "the output folder is --out DIR" in out.stderr
    assert "usage: data-prep/sick.sh" in out.stderr
    assert not (tmp_path / "data").exists() and not (REPO / "data-bin" / "snli").exists()


@pytest.mark.slow
def test_data_prep_reads_lines_at_newlines_only_and_writes_prep_json(shared_data, tmp_path):
    """A train file without its final newline, with "\\r\\n" endings, U+2028 and a lone "\\r"
    inside lines gives its 300 examples, one a line; prep.json says what was made from what; the
    same command again does nothing, --force prepares again."""

    def hostile(header, rows):
        rows = list(rows)
        rows[10] = rows[10].replace(" ", " \u2028", 1)
        rows[20] = rows[20].replace(" ", "\r", 1)
        return "\r\n".join([header, *rows]).encode()

    src = snli_folder(shared_data, tmp_path / "src", edit={"train": hostile})
    rows = (shared_data / "snli" / "snli_1.0_dev.tok.tsv").read_text().split("\n")[1:301]
    data = tmp_path / "data"
    command = ["bash", "data-prep/snli.sh", "--src-dir", src, "--out", data, "--workers", "1", "--keep-tmp"]
    out = run(command)
    assert out.returncode == 0, out.stderr
    written = (data / "tmp" / "train.tsv").read_text().split("\n")
    assert len(written) == 301 and written[-1] == ""  # 300 lines, each ending in "\n"
    assert [w.split("\t")[1:] for w in written[:-1]] == [r.split("\t")[1:3] for r in rows]  # U+2028, \r: spaces
    prep = json.loads((data / "prep.json").read_text())
    assert prep["script"] == "data-prep/snli.sh" and prep["command"].startswith("data-prep/snli.sh --src-dir")
    assert prep["splits"] == {"train": 300, "valid": 40, "test": 30}
    assert prep["inputs"]["test"]["file"] == str(src / "snli_1.0_test.tok.tsv")
    assert prep["labels"] == ["entailment", "neutral", "contradiction"]
    assert sorted(prep["files"]) == sorted(str(p.relative_to(data)) for p in data.rglob("*") if p.is_file())

    stamp = (data / "prep.json").stat().st_mtime_ns
    out = run(command)
    assert out.returncode == 0 and "already prepared" in out.stdout
    assert (data / "prep.json").stat().st_mtime_ns == stamp
    out = run([*command[:-1], "--force"])
    assert out.returncode == 0, out.stderr
    assert (data / "prep.json").stat().st_mtime_ns != stamp and not (data / "tmp").exists()


@pytest.mark.parametrize(
    "split,content,message",
    [
        ("test", b"", "snli_1.0_test.tok.tsv: no examples: the file is empty"),
        (
            "dev",
            b"gold_label\tsentence1\tsentence2\n",
            "snli_1.0_dev.tok.tsv: no examples: the file has its header line only",
        ),
    ],
    ids=["empty", "header-only"],
)
def test_data_prep_refuses_an_empty_split_naming_the_file(shared_data, tmp_path, split, content, message):
    """Issue 13.3: an empty SNLI test file gave "test: 0 examples" and exit 0; training failed later."""
    src = snli_folder(shared_data, tmp_path / "src", edit={split: lambda header, rows: content})
    out = run(["bash", "data-prep/snli.sh", "--src-dir", src, "--out", tmp_path / "data"])
    assert out.returncode != 0 and message in out.stderr, out.stderr
    assert not (tmp_path / "data").exists() and not (tmp_path / "data.partial").exists()


def test_data_prep_names_file_and_line_of_a_byte_that_is_not_utf8(shared_data, tmp_path):
    """Issue 13.6: a bare UnicodeDecodeError ("position 2209"), no file, no line."""
    src = sick_copy(shared_data, tmp_path / "src")
    lines = (src / "SICK_train.txt").read_bytes().split(b"\n")
    lines[1233] = lines[1233].replace(b"\t", "\tna\xefve ".encode("latin-1"), 1)
    (src / "SICK_train.txt").write_bytes(b"\n".join(lines))
    column = len(lines[1233].split(b"\t")[0]) + 4
    out = run(["bash", "data-prep/sick.sh", "--trial-as-test", "--src-dir", src, "--out", tmp_path / "data"])
    assert out.returncode != 0
    assert f"{src}/SICK_train.txt: line 1234, column {column}: byte 0xef is not UTF-8" in out.stderr, out.stderr
    assert "Traceback" not in out.stderr and not (tmp_path / "data").exists()


def build(data, *arguments):
    from fairseq import options, tasks

    args = options.parse_args_and_arch(
        options.get_training_parser(), input_args=[str(data), "--task", "nli", *arguments]
    )
    task = tasks.setup_task(args)
    return task, task.build_model(args)


def test_every_example_is_batched_whatever_the_batch_size_multiple(sick_data):
    task, _ = build(sick_data[0], "--arch", "lstm_nli", *SMALL_MODEL)
    task.load_dataset("test")
    for batch_size in (64, 256):
        batches = task.get_batch_iterator(
            dataset=task.dataset("test"), max_sentences=batch_size, required_batch_size_multiple=8
        ).next_epoch_itr(shuffle=False)
        ids = torch.cat([b["id"] for b in batches])
        assert sorted(ids.tolist()) == list(range(TEST_PAIRS))


def test_predictions_do_not_depend_on_padding_or_batch_company(sick_data):
    torch.manual_seed(0)
    task, model = build(
        sick_data[0],
        "--arch",
        "phm_lstm_nli",
        "--phm-n",
        "4",
        "--encoder-bidirectional",
        "--encoder-layers",
        "2",
        *SMALL_MODEL,
    )
    model.eval()
    task.load_dataset("valid")
    batch = next(
        iter(task.get_batch_iterator(dataset=task.dataset("valid"), max_sentences=16).next_epoch_itr(shuffle=False))
    )
    net_input = batch["net_input"]
    together = model(**net_input)
    pad = task.dictionary.pad()
    extra = {
        k: torch.nn.functional.pad(v, (0, 5), value=pad) if k in ("premise", "hypothesis") else v
        for k, v in net_input.items()
    }
    torch.testing.assert_close(model(**extra), together)
    for i in range(3):
        one = {
            "premise": net_input["premise"][i : i + 1, : net_input["premise_lengths"][i]],
            "premise_lengths": net_input["premise_lengths"][i : i + 1],
            "hypothesis": net_input["hypothesis"][i : i + 1, : net_input["hypothesis_lengths"][i]],
            "hypothesis_lengths": net_input["hypothesis_lengths"][i : i + 1],
        }
        torch.testing.assert_close(model(**one), together[i : i + 1], rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("config", sorted((REPO / "configs" / "table1").glob("*.yaml")), ids=lambda p: p.stem)
def test_table1_configs_have_the_papers_encoder_size(sick_data, config, capsys):
    """The parameter count that phm-params prints for each Table 1 config (the GloVe file only
    changes the embeddings, so the config is built without it)."""
    spec = yaml.safe_load(config.read_text())
    model_keys = ("arch", "phm-n", "phm-rule", "gate-layout", "encoder-embed-dim", "encoder-hidden-size")
    argv = [a for key in model_keys if key in spec["train"] for a in (f"--{key}", str(spec["train"][key]))]
    phm_params.main(["--json", "--module", "encoder.lstm", str(sick_data[0]), "--task", "nli", *argv])
    counts = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    paper = spec["paper"]["parameters"]
    assert abs(counts["total"] - paper) / paper < 0.01, (config.stem, counts["total"], paper)
    assert counts["dense_total"] == 721_200


def test_wrong_phm_n_names_the_flags(sick_data, capsys):
    with pytest.raises(SystemExit):
        phm_params.main([str(sick_data[0]), "--task", "nli", "--arch", "phm_lstm_nli", "--phm-n", "7"])
    err = capsys.readouterr().err
    assert "--phm-n 7 must divide every feature size" in err
    assert "--encoder-embed-dim 300, --encoder-hidden-size 300" in err and "[1, 2, 3, 4, 5, 6, 10," in err


def test_glove_loading(tmp_path, shared_data):
    import gzip

    from fairseq.data import Dictionary

    from phm_fairseq.models.word_vectors import glove_embeddings

    with gzip.open(shared_data / "glove" / "glove.6B.50d.top20k.txt.gz", "rt") as f:
        lines = [next(f) for _ in range(200)]
    vectors = {line.split(" ", 1)[0]: torch.tensor([float(v) for v in line.split()[1:]]) for line in lines}
    (tmp_path / "glove.txt").write_text("".join(lines))
    dictionary = Dictionary()
    for word in ("the", "The", "of", "zyxwvut"):
        dictionary.add_symbol(word)
    embed = glove_embeddings(str(tmp_path / "glove.txt"), dictionary, output_dim=50)
    weight = embed.embedding.weight
    torch.testing.assert_close(weight[dictionary.index("the")], vectors["the"])
    torch.testing.assert_close(weight[dictionary.index("The")], vectors["the"])  # by lowercasing
    assert not weight.requires_grad and embed.projection is None  # fixed, same size
    assert torch.equal(weight[dictionary.pad()], torch.zeros(50))
    projected = glove_embeddings(str(tmp_path / "glove.txt"), dictionary, output_dim=300, trainable=True)
    assert projected(torch.tensor([[4, 5]])).shape == (1, 2, 300) and projected.embedding.weight.requires_grad
    with pytest.raises(FileNotFoundError, match="no such file .*data-prep/glove.sh"):
        glove_embeddings(str(tmp_path / "missing.txt"), dictionary, 50)
    dictionary.add_symbol(".")
    spaced = ". . . " + lines[1].split(" ", 1)[1]  # 840B has words with spaces: skipped, not an error
    (tmp_path / "spaced.txt").write_text(lines[0] + spaced)
    weight = glove_embeddings(str(tmp_path / "spaced.txt"), dictionary, 50).embedding.weight
    torch.testing.assert_close(weight[dictionary.index("the")], vectors["the"])
    assert not torch.equal(weight[dictionary.index(".")], vectors[","])
    (tmp_path / "bad.txt").write_text(lines[0] + "of 0.1 0.2\n")
    with pytest.raises(ValueError, match=r"bad.txt:2: 2 values for 'of', expected 50"):
        glove_embeddings(str(tmp_path / "bad.txt"), dictionary, 50)


@pytest.mark.slow
def test_data_prep_glove_keeps_each_name_and_follows_the_contract(shared_data, tmp_path):
    """glove.sh: one file per --name in its folder; another name keeps those before (the same
    file, linked); prep.json lists them; a folder it did not make, an empty file, --dest and
    --workers are refused."""
    import gzip

    with gzip.open(shared_data / "glove" / "glove.6B.50d.top20k.txt.gz", "rt", encoding="utf-8") as f:
        lines = [next(f) for _ in range(300)]
    (tmp_path / "a").mkdir()
    with gzip.open(tmp_path / "a" / "glove.6B.50d.txt.gz", "wt", encoding="utf-8") as f:
        f.writelines(lines)
    # 100 values a word for the mechanics of a second name: each real 50-d vector twice
    doubled = "".join(line.split(" ", 1)[0] + (" " + line.rstrip("\n").split(" ", 1)[1]) * 2 + "\n" for line in lines)
    (tmp_path / "b" / "nested").mkdir(parents=True)
    with zipfile.ZipFile(tmp_path / "b" / "nested" / "glove.6B.zip", "w") as archive:
        archive.writestr("glove.6B.100d.txt", doubled)
    out = tmp_path / "glove"

    def glove(*args):
        return run(["bash", "data-prep/glove.sh", "--out", out, *args])

    assert glove("--name", "6B.50d", "--src-dir", tmp_path / "a").returncode == 0
    assert (out / "glove.6B.50d.txt").read_text() == "".join(lines)
    first = (out / "glove.6B.50d.txt").stat().st_ino
    result = glove("--name", "6B.50d", "--src-dir", tmp_path / "a")
    assert result.returncode == 0 and "already prepared" in result.stdout
    assert glove("--name", "6B.100d", "--src-dir", tmp_path / "b").returncode == 0
    assert (out / "glove.6B.100d.txt").read_text() == doubled and (out / "glove.6B.50d.txt").stat().st_ino == first
    prep = json.loads((out / "prep.json").read_text())
    assert prep["vectors"]["6B.50d"] == {
        "file": "glove.6B.50d.txt",
        "words": 300,
        "dim": 50,
        "source": str(tmp_path / "a" / "glove.6B.50d.txt.gz"),
    }
    assert prep["vectors"]["6B.100d"]["source"] == f"{tmp_path / 'b' / 'nested' / 'glove.6B.zip'}:glove.6B.100d.txt"
    assert sorted(prep["files"]) == ["glove.6B.100d.txt", "glove.6B.50d.txt", "prep.json"]

    (tmp_path / "c").mkdir()
    (tmp_path / "c" / "glove.6B.300d.txt").write_text("")
    result = glove("--name", "6B.300d", "--src-dir", tmp_path / "c")
    assert result.returncode != 0 and f"{tmp_path / 'c' / 'glove.6B.300d.txt'} is empty" in result.stderr
    assert sorted(p.name for p in out.iterdir()) == ["glove.6B.100d.txt", "glove.6B.50d.txt", "prep.json"]
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "vectors.txt").write_text("keep me")
    result = run(
        ["bash", "data-prep/glove.sh", "--out", tmp_path / "mine", "--name", "6B.50d", "--src-dir", tmp_path / "a"]
    )
    assert result.returncode != 0 and "was not made by a data-prep script" in result.stderr
    assert [p.name for p in (tmp_path / "mine").iterdir()] == ["vectors.txt"]
    for option in ("--dest", "--workers"):
        result = glove(option, "1")
        assert result.returncode == 2 and f"unknown option '{option}'" in result.stderr


@pytest.fixture(scope="module")
@slow
def trained(sick_data, shared_data, tmp_path_factory):
    """A small PHM-LSTM trained with fairseq-train on the real SICK training pairs."""
    root = tmp_path_factory.mktemp("train")
    glove = root / "glove.txt.gz"
    shutil.copy(shared_data / "glove" / "glove.6B.50d.top20k.txt.gz", glove)
    out = run(
        [
            "fairseq-train",
            *NO_PREFETCH_THREAD,
            sick_data[0],
            "--user-dir",
            "phm_fairseq",
            "--task",
            "nli",
            "--arch",
            "phm_lstm_nli",
            "--phm-n",
            "4",
            *SMALL_MODEL,
            "--glove",
            glove,
            "--criterion",
            "classification",
            "--optimizer",
            "adam",
            "--lr",
            "0.003",
            "--batch-size",
            "32",
            "--max-epoch",
            "6",
            "--seed",
            "1",
            "--save-dir",
            root / "checkpoints",
            "--best-checkpoint-metric",
            "accuracy",
            "--maximize-best-checkpoint-metric",
            "--no-epoch-checkpoints",
            "--log-format",
            "simple",
        ]
    )
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    glove.unlink()  # evaluation must not need the vectors file: the checkpoint holds them
    return root / "checkpoints" / "checkpoint_best.pt", out.stdout + out.stderr


@pytest.mark.slow
def test_training_logs_accuracy_and_beats_the_majority_class(sick_data, trained):
    checkpoint, log = trained
    assert "| train | epoch 006 |" in log and "accuracy" in log.split("| train | epoch 006 |")[1].splitlines()[0]
    assert "valid on 'valid' subset" in log and "best_accuracy" in log
    out = run_main(
        phm_evaluate.main, sick_data[0], "--path", checkpoint, "--subset", "test", "--batch-size", "64", "--json"
    )
    assert out.returncode == 0, out.stderr
    report = json.loads(out.stdout.strip().splitlines()[-1])
    assert report["examples"] == TEST_PAIRS and sum(map(sum, report["confusion"])) == TEST_PAIRS
    assert report["labels"] == ["entailment", "neutral", "contradiction"]
    gold = [sum(row) for row in report["confusion"]]
    majority = 100.0 * max(gold) / TEST_PAIRS
    assert report["accuracy"] > majority + 5, (report["accuracy"], majority)
    assert report["accuracy"] == pytest.approx(100.0 * sum(report["confusion"][i][i] for i in range(3)) / TEST_PAIRS)
    assert report["examples_per_second"] > 0
    assert "confusion matrix" in out.stdout


@pytest.mark.slow
def test_checkpoints_load_safely(trained):
    state = torch.load(trained[0], weights_only=True)  # the torch >= 2.6 default, made explicit
    assert state["task_state"]["labels"] == ["entailment", "neutral", "contradiction"]
    assert classes_in_checkpoint(trained[0]) == ["argparse.Namespace"]  # no class of the plugin


@pytest.mark.slow
def test_evaluate_refuses_what_it_cannot_score(sick_data, trained, tmp_path, capsys):
    data, checkpoint = sick_data[0], trained[0]
    state = torch.load(checkpoint, weights_only=True)
    state["cfg"]["task"].task = "translation"
    torch.save(state, tmp_path / "translation.pt")
    torch.save({"weight": torch.zeros(3)}, tmp_path / "weights.pt")
    reordered = tmp_path / "reordered"
    shutil.copytree(data, reordered)
    (reordered / "labels.txt").write_text("neutral\nentailment\ncontradiction\n")
    cases = [
        ([str(data), "--path", str(tmp_path / "nothing.pt")], "no such checkpoint file"),
        ([str(data), "--path", str(tmp_path / "translation.pt")], "holds a model for task 'translation'"),
        ([str(data), "--path", str(tmp_path / "weights.pt")], "not a fairseq training checkpoint"),
        (
            [str(reordered), "--path", str(checkpoint)],
            "trained with the labels ['entailment', 'neutral', 'contradiction']",
        ),
        ([str(data), "--path", str(checkpoint), "--subset", "test2"], "no 'test2' split"),
    ]
    for argv, message in cases:
        with pytest.raises(SystemExit) as exit:
            phm_evaluate.main(argv)
        assert exit.value.code == 2
        assert message in capsys.readouterr().err, message


@pytest.mark.slow
def test_memory_efficient_fp16_trains_and_resumes_the_phm_lstm_on_cpu(sick_data, tmp_path):
    """The PHM-LSTM in half precision: fairseq halves the model, torch's fused LSTM kernel runs in float16."""
    from conftest import LAUNCHER, assert_trained_in_half_precision

    data = sick_data[0]
    # phm-run's fairseq-train, which skips an overflowing step on a CPU as fairseq does on a GPU
    command = [*LAUNCHER, data, "--user-dir", "phm_fairseq", "--task", "nli", "--arch", "phm_lstm_nli"]
    command += ["--phm-n", "4", *SMALL_MODEL, "--criterion", "classification", "--optimizer", "adam", "--lr", "0.003"]
    command += ["--batch-size", "32", "--seed", "1", "--save-dir", tmp_path, "--no-epoch-checkpoints"]
    command += ["--log-format", "simple", "--log-interval", "25", "--cpu", "--memory-efficient-fp16"]
    out = run([*command, "--max-update", "150"])
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    assert_trained_in_half_precision(out.stdout + out.stderr, fall=0.9)
    out = run([*command, "--max-update", "160"])
    assert out.returncode == 0 and "Loaded checkpoint" in out.stdout + out.stderr and "num_updates 160" in out.stdout
    out = run_main(phm_evaluate.main, data, "--path", tmp_path / "checkpoint_last.pt", "--subset", "test", "--json")
    assert out.returncode == 0, out.stderr[-3000:]
    assert json.loads(out.stdout.strip().splitlines()[-1])["examples"] == TEST_PAIRS
