"""The data-prep/ scripts, run for real and offline on local folders.

Multi30k comes with the project and Shakespeare with the workplace's corpora; the other corpora
are out of reach offline, so their tests build small folders in each corpus's official layout
(the same archive and file names, IWSLT's train.tags and XML, WMT's SGML, OPUS's zip) filled
with real English-German sentence pairs of Multi30k: the text is not the corpus's, but every
script's parsing is exercised. The output contract is checked with fairseq's own loaders.
"""

import gzip
import io
import json
import os
import shlex
import subprocess
import sys
import tarfile
import unicodedata
import zipfile
from pathlib import Path

import pytest

# every test runs a data-prep script for real: bash, the text tools and fairseq-preprocess
pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parent.parent
MULTI30K = REPO / "data" / "multi30k"
# the scripts find their tools on PATH: those of the environment running the tests
ENV = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
FAST = ("--workers", "1", "--bpe-size", "300")  # tiny corpora: one process, few merges


def run(script, *args, cwd, ok=True):
    result = subprocess.run(
        ["bash", str(REPO / "data-prep" / script), *args], cwd=cwd, env=ENV, capture_output=True, text=True, timeout=300
    )
    if ok:
        assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return result


def fails(script, *args, cwd):
    """Runs a script that must fail; returns its error message."""
    result = run(script, *args, cwd=cwd, ok=False)
    assert result.returncode != 0, result.stdout[-3000:]
    return result.stderr


def read_lines(path):
    """The lines of a text file, split at "\n" only, as the scripts split them (the last line
    counts with or without its "\n")."""
    opener = gzip.open if str(path).endswith(".gz") else open
    with opener(path, "rt", encoding="utf-8", newline="") as f:
        lines = f.read().split("\n")
    return lines[:-1] if lines[-1] == "" else lines


@pytest.fixture(scope="module")
def pairs():
    """Real sentence pairs: Multi30k's English-German training set, bundled in data/."""
    return list(zip(read_lines(MULTI30K / "train.en.gz"), read_lines(MULTI30K / "train.de.gz")))


def swap(pairs):
    return [(b, a) for a, b in pairs]


def write(path, lines):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")


def write_gz(path, lines):
    path.parent.mkdir(parents=True, exist_ok=True)
    with gzip.open(path, "wt", encoding="utf-8") as f:
        f.writelines(line + "\n" for line in lines)


def tgz(path, files):
    """A .tgz of {name in archive: lines}."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with tarfile.open(path, "w:gz") as archive:
        for name, lines in files.items():
            data = "".join(line + "\n" for line in lines).encode()
            info = tarfile.TarInfo(name)
            info.size = len(data)
            archive.addfile(info, io.BytesIO(data))


def truncate(path):
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])


def iwslt_train_tags(sentences, talks=3):
    """IWSLT's train.tags: per talk, metadata tag lines, a title and a description (text lines
    too), then the transcript; returns (lines, the text lines in order)."""
    lines, text = [], []
    per_talk = len(sentences) // talks
    for t in range(talks):
        chunk = sentences[t * per_talk : (t + 1) * per_talk]
        title, description, transcript = chunk[0], chunk[1], chunk[2:]
        lines += [
            f"<url>http://www.ted.com/talks/talk{t}.html</url>",
            "<keywords>talks, science</keywords>",
            "<speaker>A Speaker</speaker>",
            f"<talkid>{t}</talkid>",
            f"<title>{title}</title>",
            f"<description>{description}</description>",
            '<reviewer href="http://www.ted.com/profiles/1">R</reviewer>',
            '<translator href="http://www.ted.com/profiles/2">T</translator>',
            *transcript,
        ]
        text += [title, description, *transcript]
    return lines, text


def segs_file(sentences, setid, lang, ref=False):
    """IWSLT's .xml / WMT's .sgm: one document of <seg> lines, padded as the real files are."""
    tag = "refset" if ref else "srcset"
    return [
        '<?xml version="1.0" encoding="UTF-8"?>',
        "<mteval>",
        f'<{tag} setid="{setid}" srclang="any" trglang="{lang}">',
        '<doc docid="1" genre="news">',
        "<url>http://example.org</url>",
        "<description>A talk.</description>",
        "<talkid>1</talkid>",
        "<title>Title</title>",
        "<p>",
        *(f'<seg id="{i}"> {s} </seg>' for i, s in enumerate(sentences, 1)),
        "</p>",
        "</doc>",
        f"</{tag}>",
        "</mteval>",
    ]


def check_output(out, src, tgt, counts, lowercase=False, tokenized=True):
    """The output contract: fairseq's loaders read every split with the right number of
    sentences, the joined dictionary, the BPE model, raw references aligned with the binarized
    data (checked sentence by sentence), prep.json."""
    from fairseq.data import Dictionary, data_utils
    from sacremoses import MosesTokenizer

    prep = json.loads((out / "prep.json").read_text())
    assert prep["splits"] == counts
    assert (prep["source_lang"], prep["target_lang"], prep["name"]) == (src, tgt, out.name)
    assert (out / f"dict.{src}.txt").read_bytes() == (out / f"dict.{tgt}.txt").read_bytes()
    bpe = prep["bpe"]["kind"]
    assert (out / prep["bpe"]["file"]).is_file()
    assert str(out.resolve() / prep["bpe"]["file"]) == prep["generate_argv"][-1]  # one argument, spaces and all
    assert prep["generate_argv"][:4] == ["--source-lang", src, "--target-lang", tgt]
    assert ("--tokenizer" in prep["generate_argv"]) == (tokenized and bpe == "subword_nmt")
    assert shlex.split(prep["generate_args"]) == prep["generate_argv"]  # the same, quoted for a shell
    assert prep["command"] and prep["versions"]["sacremoses"] and prep["versions"]["subword-nmt"]
    assert not (out / "tmp").exists() and not Path(f"{out}.partial").exists()

    def expected(line, lang):  # the binarized sentence of a raw line, with BPE removed
        if bpe == "sentencepiece":
            return " ".join(unicodedata.normalize("NFKC", line).split())
        if tokenized:
            return moses[lang].tokenize(line, aggressive_dash_splits=True, return_str=True, escape=True)
        return " ".join(line.split())

    moses = {lang: MosesTokenizer(lang) for lang in (src, tgt)}
    dictionary = Dictionary.load(str(out / f"dict.{src}.txt"))
    for split, n in counts.items():
        for lang in (src, tgt):
            data = data_utils.load_indexed_dataset(str(out / f"{split}.{src}-{tgt}.{lang}"), dictionary)
            assert data is not None and len(data) == n, (split, lang)
            if split == "train":
                continue
            raw = read_lines(out / "raw" / f"{split}.{lang}")
            assert len(raw) == n
            if lowercase:
                assert raw == [line.lower() for line in raw]
            compared = 0
            for i, line in enumerate(raw):  # each binarized sentence is its raw reference's
                decoded = dictionary.string(data[i], bpe_symbol=bpe)
                if "<unk>" not in decoded:  # a subword unseen in training: nothing to compare
                    assert decoded == expected(line, lang), (split, lang, i)
                    compared += 1
            assert compared >= 0.8 * n
    return prep


# --- Multi30k (bundled) and Shakespeare (the workplace's copy) ---------------------------------


@pytest.fixture(scope="module")
def multi30k_slice(tmp_path_factory):
    """The bundled Multi30k with the first 3,000 training pairs (whole valid and test)."""
    folder = tmp_path_factory.mktemp("multi30k")
    for lang in ("en", "de"):
        write_gz(folder / f"train.{lang}.gz", read_lines(MULTI30K / f"train.{lang}.gz")[:3000])
        for split in ("val", "test_2016_flickr"):
            (folder / f"{split}.{lang}.gz").write_bytes((MULTI30K / f"{split}.{lang}.gz").read_bytes())
    return folder


def test_multi30k_subword_nmt_then_rerun_then_sentencepiece(multi30k_slice, tmp_path):
    out = tmp_path / "data-bin" / "multi30k.en-de"
    result = run("multi30k.sh", "--src-dir", str(multi30k_slice), "--bpe-size", "2000", cwd=tmp_path)
    assert "[7/7]" in result.stdout and "test      1000 lines" in result.stdout
    counts = {"train": 3000, "valid": 1014, "test": 1000}
    prep = check_output(out, "en", "de", counts)
    assert prep["bpe"] == {"kind": "subword_nmt", "size": 2000, "file": "bpe.codes"}
    assert prep["source"] == {"dir": str(multi30k_slice)}
    assert read_lines(out / "raw" / "test.de") == read_lines(MULTI30K / "test_2016_flickr.de.gz")

    # the same settings again: nothing to do
    stamp = (out / "prep.json").stat().st_mtime_ns
    result = run("multi30k.sh", "--src-dir", str(multi30k_slice), "--bpe-size", "2000", cwd=tmp_path)
    assert "already prepared" in result.stdout
    assert (out / "prep.json").stat().st_mtime_ns == stamp

    # another script's output is refused, whatever --force says
    error = fails("iwslt15.sh", "--src-dir", str(tmp_path), "--out", str(out), "--force", cwd=tmp_path)
    assert f"{out} was made by data-prep/multi30k.sh (see its prep.json), not by data-prep/iwslt15.sh" in error

    # other settings, same output: prepared again, unless the folder holds a file the script
    # did not write (it would be lost with the old output)
    (out / "raw" / "my-notes.txt").write_text("keep me")
    error = fails("multi30k.sh", "--src-dir", str(multi30k_slice), "--bpe", "sentencepiece", cwd=tmp_path)
    assert "data-bin/multi30k.en-de holds files that data-prep/multi30k.sh did not write (raw/my-notes.txt)" in error
    assert (out / "prep.json").stat().st_mtime_ns == stamp and (out / "raw" / "my-notes.txt").is_file()
    (out / "raw" / "my-notes.txt").unlink()
    run("multi30k.sh", "--src-dir", str(multi30k_slice), "--bpe", "sentencepiece", "--bpe-size", "1000", cwd=tmp_path)
    prep = check_output(out, "en", "de", counts)
    assert prep["bpe"]["kind"] == "sentencepiece" and not (out / "bpe.codes").exists()
    assert "sentencepiece reads the raw text" in prep["tokenizer"]


def test_shakespeare_keeps_its_tokenization_and_says_valid_doubles_as_test(shared_data, tmp_path):
    src = tmp_path / "shakespeare"
    corpus = shared_data / "shakespeare"
    for side in ("modern", "original"):
        write(src / f"train.{side}.nltktok", read_lines(corpus / f"train.{side}.nltktok")[:2000])
        write(src / f"valid.{side}.nltktok", read_lines(corpus / f"valid.{side}.nltktok"))
    out = tmp_path / "shakespeare.modern-original"
    result = run("shakespeare.sh", "--src-dir", str(src), "--out", str(out), *FAST, cwd=tmp_path)
    assert "valid split doubles as test" in result.stderr
    prep = check_output(out, "modern", "original", {"train": 2000, "valid": 1218, "test": 1218}, tokenized=False)
    assert "valid split doubles as test" in prep["notes"][0]
    assert read_lines(out / "raw" / "test.original") == read_lines(corpus / "valid.original.nltktok")


# --- the other corpora, in their official layouts -----------------------------------------------


def iwslt_sets(folder, prefix, pair, sets, sentences):
    """IWSLT XML files for SETS, each filled with the next sentence pairs (in PAIR's language
    order); returns the pairs used."""
    l1, l2 = pair.split("-")
    used = []
    for k, name in enumerate(sets):
        chunk = sentences[k * 20 : (k + 1) * 20]
        for i, lang in ((0, l1), (1, l2)):
            write(folder / f"{prefix}.{name}.{pair}.{lang}.xml", segs_file([p[i] for p in chunk], name, lang))
        used += chunk
    return used


def test_iwslt14_de_en_archive_fairseq_split_lowercased(pairs, tmp_path):
    src, staging = tmp_path / "src", tmp_path / "staging"
    de_lines, de_text = iwslt_train_tags([p[1] for p in pairs[:230]])
    en_lines, en_text = iwslt_train_tags([p[0] for p in pairs[:230]])
    sets = ["TED.dev2010", "TEDX.dev2012", "TED.tst2010", "TED.tst2011", "TED.tst2012"]
    test = iwslt_sets(staging / "de-en", "IWSLT14", "de-en", sets, swap(pairs[1000:]))
    files = {f"de-en/train.tags.de-en.{lang}": lines for lang, lines in (("de", de_lines), ("en", en_lines))}
    files.update({f"de-en/{p.name}": read_lines(p) for p in (staging / "de-en").iterdir()})
    tgz(src / "de-en.tgz", files)

    out = tmp_path / "iwslt14.de-en"
    run("iwslt14.sh", "--src-dir", str(src), "--out", str(out), *FAST, cwd=tmp_path)
    prep = json.loads((out / "prep.json").read_text())
    assert prep["train_before_clean"] == len(de_text) - len(de_text) // 23
    assert prep["lowercase"] is True and prep["clean"] == {"max_len": 175, "ratio": 1.5}
    check_output(
        out,
        "de",
        "en",
        {"train": prep["splits"]["train"], "valid": len(de_text) // 23, "test": len(test)},
        lowercase=True,
    )
    # valid is every 23rd text line of train.tags (titles, descriptions included), test the XML
    assert read_lines(out / "raw" / "valid.de") == [s.lower() for s in de_text[22::23]]
    assert read_lines(out / "raw" / "test.en") == [p[1].lower() for p in test]


def test_iwslt14_en_ro_extracted_files_reverse_direction(pairs, tmp_path):
    """ro-en asked for as en-ro, from the archive's extracted files: the archive's own file
    names (ro-en) with the direction swapped. German stands in for Romanian text."""
    folder = tmp_path / "src" / "ro-en"
    for lang, i in (("ro", 1), ("en", 0)):
        write(folder / f"train.tags.ro-en.{lang}", iwslt_train_tags([p[i] for p in pairs[:90]])[0])
    valid = iwslt_sets(folder, "IWSLT14", "ro-en", ["TED.dev2010"], swap(pairs[1000:]))
    test = iwslt_sets(folder, "IWSLT14", "ro-en", ["TED.tst2010", "TED.tst2011", "TED.tst2012"], swap(pairs[2000:]))
    out = tmp_path / "iwslt14.en-ro"
    run(
        "iwslt14.sh",
        "-s",
        "en",
        "-t",
        "ro",
        "--cased",
        "--src-dir",
        str(tmp_path / "src"),
        "--out",
        str(out),
        *FAST,
        cwd=tmp_path,
    )
    prep = json.loads((out / "prep.json").read_text())
    assert prep["train_before_clean"] == 90
    check_output(out, "en", "ro", {"train": prep["splits"]["train"], "valid": 20, "test": 60})
    assert read_lines(out / "raw" / "valid.ro") == [p[0] for p in valid]
    assert read_lines(out / "raw" / "test.en") == [p[1] for p in test]


def test_iwslt17_en_id_archive(pairs, tmp_path):
    staging = tmp_path / "staging" / "en-id"
    for lang, i in (("en", 0), ("id", 1)):
        write(staging / f"train.tags.en-id.{lang}", iwslt_train_tags([p[i] for p in pairs[:90]])[0])
    valid = iwslt_sets(staging, "IWSLT17", "en-id", ["TED.dev2010"], pairs[1000:])
    test = iwslt_sets(staging, "IWSLT17", "en-id", ["TED.tst2017plus"], pairs[2000:])
    tgz(tmp_path / "src" / "en-id.tgz", {f"en-id/{p.name}": read_lines(p) for p in staging.iterdir()})
    out = tmp_path / "iwslt17.en-id"
    run("iwslt17.sh", "--src-dir", str(tmp_path / "src"), "--out", str(out), *FAST, cwd=tmp_path)
    prep = json.loads((out / "prep.json").read_text())
    check_output(out, "en", "id", {"train": prep["splits"]["train"], "valid": 20, "test": 20})
    assert read_lines(out / "raw" / "valid.id") == [p[1] for p in valid]
    assert read_lines(out / "raw" / "test.en") == [p[0] for p in test]


def test_iwslt15_en_vi_stanford_files_are_detokenized(pairs, tmp_path):
    """Stanford's files are Moses-tokenized and XML-escaped; the references come out plain."""
    from sacremoses import MosesTokenizer

    tokenizers = {"en": MosesTokenizer("en"), "vi": MosesTokenizer("de")}
    chosen = [p for p in pairs if "'" in p[0] or '"' in p[0]][:40] + pairs[:160]
    files = {"train": chosen[40:], "tst2012": chosen[:20], "tst2013": chosen[20:40]}
    for name, part in files.items():
        for lang, i in (("en", 0), ("vi", 1)):
            write(
                tmp_path / "src" / f"{name}.{lang}",
                [tokenizers[lang].tokenize(p[i], return_str=True, escape=True) for p in part],
            )
    out = tmp_path / "iwslt15.en-vi"
    run("iwslt15.sh", "--src-dir", str(tmp_path / "src"), "--out", str(out), *FAST, cwd=tmp_path)
    check_output(out, "en", "vi", {"train": 160, "valid": 20, "test": 20})
    raw = read_lines(out / "raw" / "valid.en")
    assert not any("&apos;" in s or "&quot;" in s for s in raw)
    assert sum(a == p[0] for a, p in zip(raw, files["tst2012"])) >= 18  # detok(tok(x)) == x


def wmt_sets(folder, sets, sentences, langs):
    """WMT SGML files (SET-XXYY-src.XX.sgm, SET-XXYY-ref.YY.sgm), each with the next pairs."""
    src, tgt = langs
    used = {}
    for k, name in enumerate(sets):
        chunk = sentences[k * 30 : (k + 1) * 30]
        write(folder / f"{name}-{src}{tgt}-src.{src}.sgm", segs_file([p[0] for p in chunk], name, src))
        write(folder / f"{name}-{src}{tgt}-ref.{tgt}.sgm", segs_file([p[1] for p in chunk], name, tgt, ref=True))
        used[name] = chunk
    return used


def test_wmt16_en_ro_archives_and_opus_zip(pairs, tmp_path):
    src, staging = tmp_path / "src", tmp_path / "staging"
    tgz(
        src / "training-parallel-ep-v8.tgz",
        {
            "training-parallel-ep-v8/europarl-v8.ro-en.ro": [p[1] for p in pairs[:100]],
            "training-parallel-ep-v8/europarl-v8.ro-en.en": [p[0] for p in pairs[:100]],
        },
    )
    with zipfile.ZipFile(src / "en-ro.txt.zip", "w") as archive:
        archive.writestr("SETIMES.en-ro.en", "".join(p[0] + "\n" for p in pairs[100:160]))
        archive.writestr("SETIMES.en-ro.ro", "".join(p[1] + "\n" for p in pairs[100:160]))
        archive.writestr("README", "SETIMES2 from OPUS\n")
    sets = wmt_sets(staging, ["newsdev2016", "newstest2016"], pairs[1000:], ("en", "ro"))
    tgz(src / "dev.tgz", {f"dev/{p.name}": read_lines(p) for p in staging.glob("newsdev*")})
    tgz(src / "test.tgz", {f"test/{p.name}": read_lines(p) for p in staging.glob("newstest*")})
    out = tmp_path / "wmt16.en-ro"
    run("wmt16.sh", "--src-dir", str(src), "--out", str(out), *FAST, cwd=tmp_path)
    prep = json.loads((out / "prep.json").read_text())
    assert prep["train_before_clean"] == 160
    check_output(out, "en", "ro", {"train": prep["splits"]["train"], "valid": 30, "test": 30})
    assert read_lines(out / "raw" / "test.ro") == [p[1] for p in sets["newstest2016"]]


def test_wmt18_et_en_five_archives(pairs, tmp_path):
    src, staging = tmp_path / "src", tmp_path / "staging"
    crawl = "paracrawl-release1.en-et.zipporah0-dedup-clean"
    for archive, name, part in (
        ("training-parallel-ep-v8.tgz", "training/europarl-v8.et-en", pairs[:50]),
        (f"{crawl}.tgz", crawl, pairs[50:100]),
        ("rapid2016.tgz", "rapid2016.et-en", pairs[100:130]),
    ):
        tgz(src / archive, {f"{name}.en": [p[0] for p in part], f"{name}.et": [p[1] for p in part]})
    # et-en: German stands in for Estonian, the source side
    sets = wmt_sets(staging, ["newsdev2018", "newstest2018"], swap(pairs[1000:]), ("et", "en"))
    tgz(src / "dev.tgz", {f"dev/{p.name}": read_lines(p) for p in staging.glob("newsdev*")})
    tgz(src / "test.tgz", {f"test/{p.name}": read_lines(p) for p in staging.glob("newstest*")})
    out = tmp_path / "wmt18.et-en"
    run("wmt18.sh", "-s", "et", "--src-dir", str(src), "--out", str(out), *FAST, cwd=tmp_path)
    prep = json.loads((out / "prep.json").read_text())
    assert prep["train_before_clean"] == 130
    check_output(out, "et", "en", {"train": prep["splits"]["train"], "valid": 30, "test": 30})
    assert read_lines(out / "raw" / "valid.et") == [p[0] for p in sets["newsdev2018"]]


def test_setimes_en_mk_holds_out_valid_and_test(pairs, tmp_path):
    tgz(
        tmp_path / "src" / "setimes.en-mk.txt.tgz",
        {"setimes.en-mk.en.txt": [p[0] for p in pairs[:1000]], "setimes.en-mk.mk.txt": [p[1] for p in pairs[:1000]]},
    )
    out = tmp_path / "setimes.en-mk"
    run("setimes.sh", "--src-dir", str(tmp_path / "src"), "--out", str(out), *FAST, cwd=tmp_path)
    prep = json.loads((out / "prep.json").read_text())
    assert prep["train_before_clean"] == 1000 - 10 - 10
    check_output(out, "en", "mk", {"train": prep["splits"]["train"], "valid": 10, "test": 10})
    assert read_lines(out / "raw" / "valid.mk") == [p[1] for p in pairs[99:1000:100]]


# --- rejections ---------------------------------------------------------------------------------


def test_misaligned_line_counts_name_both_files_and_leave_no_output(multi30k_slice, tmp_path):
    src = tmp_path / "src"
    src.mkdir()
    for f in multi30k_slice.iterdir():
        (src / f.name).write_bytes(f.read_bytes())
    write_gz(src / "val.de.gz", read_lines(MULTI30K / "val.de.gz")[:-1])
    error = fails("multi30k.sh", "--src-dir", str(src), cwd=tmp_path)
    assert "misaligned valid data" in error
    assert f"{src}/val.en.gz:val.en has 1014 lines but {src}/val.de.gz:val.de has 1013" in error
    assert not (tmp_path / "data-bin" / "multi30k.en-de").exists()
    assert not (tmp_path / "data-bin" / "multi30k.en-de.partial").exists()


def test_truncated_gzip_and_missing_file(multi30k_slice, tmp_path):
    src = tmp_path / "src"
    src.mkdir()
    for f in multi30k_slice.iterdir():
        (src / f.name).write_bytes(f.read_bytes())
    truncate(src / "train.de.gz")
    error = fails("multi30k.sh", "--src-dir", str(src), cwd=tmp_path)
    assert f"{src}/train.de.gz is truncated or corrupt" in error
    assert "unexpected end of file" in error and "multi30k/dataset" in error

    (src / "train.de.gz").unlink()
    error = fails("multi30k.sh", "--src-dir", str(src), cwd=tmp_path)
    assert "missing input file train.de" in error and "train.de.gz" in error
    assert not any((tmp_path / "data-bin").iterdir())


@pytest.mark.parametrize("script, archive", [("iwslt14.sh", "de-en.tgz"), ("wmt16.sh", "en-ro.txt.zip")])
def test_truncated_archive(script, archive, pairs, tmp_path):
    path = tmp_path / "src" / archive
    if archive.endswith(".zip"):
        path.parent.mkdir()
        with zipfile.ZipFile(path, "w") as z:
            z.writestr("SETIMES.en-ro.en", "".join(p[0] + "\n" for p in pairs[:500]))
    else:
        tgz(path, {"de-en/train.tags.de-en.de": [p[1] for p in pairs[:500]]})
    truncate(path)
    error = fails(script, "--src-dir", str(path.parent), cwd=tmp_path)
    assert f"{path} is truncated or corrupt" in error and "get a fresh copy from http" in error


def test_truncated_or_failed_download_leaves_no_file(tmp_path):
    """The download step itself, on file:// URLs (curl reads them like any other)."""
    good = tmp_path / "good.tgz"
    tgz(good, {"a.txt": ["x"]})
    bad = tmp_path / "bad.tgz"
    bad.write_bytes(good.read_bytes()[:20])
    lib = REPO / "data-prep" / "lib.sh"

    def download(url):
        return subprocess.run(
            ["bash", "-c", f'source "{lib}"; NAME=test; download "$1" "$2"', "-", url, str(tmp_path / "dl" / "x.tgz")],
            env=ENV,
            capture_output=True,
            text=True,
        )

    result = download(bad.as_uri())
    assert result.returncode != 0
    assert f"the download of {bad.as_uri()} is truncated or not the expected file" in result.stderr
    result = download((tmp_path / "absent.tgz").as_uri())
    assert result.returncode != 0 and "could not download" in result.stderr and "--src-dir" in result.stderr
    assert not any((tmp_path / "dl").iterdir())
    assert download(good.as_uri()).returncode == 0
    assert (tmp_path / "dl" / "x.tgz").read_bytes() == good.read_bytes()


@pytest.mark.parametrize(
    "script, args, message",
    [
        (
            "multi30k.sh",
            ["-s", "en", "-t", "xx"],
            "unsupported language pair en-xx for multi30k: supported pairs are "
            "en-de, de-en, en-fr, fr-en, en-cs, cs-en",
        ),
        (
            "iwslt14.sh",
            ["-t", "fr"],
            "unsupported language pair ?-fr for iwslt14: supported pairs are de-en, en-de, ro-en, en-ro",
        ),
        ("wmt18.sh", ["-s", "ro"], "unsupported language pair ro-? for wmt18: supported pairs are en-et, et-en"),
        (
            "multi30k.sh",
            ["--frobnicate"],
            "unknown option '--frobnicate' (see --help)\nusage: data-prep/multi30k.sh [-s L]",
        ),
        (
            "iwslt14.sh",
            ["--dest", "x"],
            "unknown option '--dest': the output folder is --out DIR, in every data-prep script",
        ),
        ("multi30k.sh", ["--bpe", "wordpiece"], "unknown --bpe 'wordpiece': use subword_nmt or sentencepiece"),
        ("multi30k.sh", ["--src-dir"], "option --src-dir needs a value"),
        (
            "multi30k.sh",
            ["-t", "de", "-s"],
            "multi30k.sh: error: option -s needs a value\nusage: data-prep/multi30k.sh [-s L]",
        ),
        ("multi30k.sh", ["--src-dir", "/nonexistent"], "--src-dir /nonexistent: no such folder"),
    ],
)
def test_bad_arguments(script, args, message, tmp_path):
    error = fails(script, *args, cwd=tmp_path)
    assert message in error and error.count("error:") == 1, error
    assert not (tmp_path / "data-bin").exists()


def test_refuses_to_overwrite_a_folder_it_did_not_write(tmp_path):
    out = tmp_path / "mine"
    out.mkdir()
    (out / "notes.txt").write_text("keep me")
    error = fails("multi30k.sh", "--src-dir", str(MULTI30K), "--out", str(out), cwd=tmp_path)
    assert f"{out} exists, is not empty and was not made by a data-prep script (no prep.json)" in error
    assert "it is left as it is; choose another --out" in error
    assert [p.name for p in out.iterdir()] == ["notes.txt"] and (out / "notes.txt").read_text() == "keep me"
    assert not Path(f"{out}.partial").exists()

    # a prep.json of the scripts before this contract: it names the corpus, not the files it wrote
    (out / "prep.json").write_text(json.dumps({"dataset": "multi30k", "config": {"dataset": "multi30k"}}))
    error = fails("multi30k.sh", "--src-dir", str(MULTI30K), "--out", str(out), cwd=tmp_path)
    assert f"{out} was made by an earlier version of data-prep/multi30k.sh, whose prep.json does not list" in error
    assert sorted(p.name for p in out.iterdir()) == ["notes.txt", "prep.json"]
    # an OUT.partial that no data-prep script made is not removed either
    (out / "prep.json").unlink()
    (out / "notes.txt").unlink()
    Path(f"{out}.partial").mkdir()
    error = fails("multi30k.sh", "--src-dir", str(MULTI30K), "--out", str(out), cwd=tmp_path)
    assert f"{out}.partial exists and is not an unfinished output of data-prep/multi30k.sh" in error


# --- hostile input: what a line is, empty files, bytes that are not UTF-8 ------------------------


def multi30k_files(folder, train=1200, valid=60, test=50, edit=None):
    """A small Multi30k en-de folder in the official layout (gzipped). ``edit`` maps a file
    name (val.de.gz) to a function of its list of lines that returns the file's bytes."""
    folder.mkdir(parents=True, exist_ok=True)
    sizes = {"train": train, "val": valid, "test_2016_flickr": test}
    for name, size in sizes.items():
        for lang in ("en", "de"):
            file = f"{name}.{lang}.gz"
            lines = read_lines(MULTI30K / file)[:size]
            data = "".join(line + "\n" for line in lines).encode()
            if edit and file in edit:
                data = edit[file](lines)
            with gzip.open(folder / file, "wb") as f:
                f.write(data)
    return folder


def without_final_newline(lines):
    return "\n".join(lines).encode()


def test_a_missing_final_newline_ends_a_line_like_any_other(tmp_path):
    """Issue 13.2: train files without their last "\n" merged the last training pair with the
    first valid one (exit 0, 1199 pairs); test files without it failed an internal check."""
    edit = {
        f"{name}.{lang}.gz": without_final_newline
        for name in ("train", "val", "test_2016_flickr")
        for lang in ("en", "de")
    }
    src = multi30k_files(tmp_path / "src", edit=edit)
    out = tmp_path / "multi30k.en-de"
    run("multi30k.sh", "--src-dir", str(src), "--out", str(out), *FAST, cwd=tmp_path)
    prep = check_output(out, "en", "de", {"train": 1200, "valid": 60, "test": 50})
    assert prep["train_before_clean"] == 1200
    for split, name in (("valid", "val"), ("test", "test_2016_flickr")):
        for lang in ("en", "de"):
            assert read_lines(out / "raw" / f"{split}.{lang}") == read_lines(src / f"{name}.{lang}.gz")
    assert read_lines(out / "raw" / "valid.en")[0] == read_lines(MULTI30K / "val.en.gz")[0]


def test_line_separators_inside_a_line_and_crlf_files_keep_one_sentence_a_line(tmp_path):
    """Issue 13.7: U+2028, U+0085 and a lone "\r" are characters of a line; only "\n" ends one.
    A reference that holds them is one line in raw/, one tokenized line, one binarized example,
    with subword-nmt (after sacremoses) and with sentencepiece. "\r\n" files read as "\n" files."""
    odd = {1: "\u2028", 4: "\u0085", 7: "\r", 9: "\u2029\x0c"}

    def with_separators(lines):
        lines = list(lines)
        for i, char in odd.items():
            words = lines[i].split(" ")
            lines[i] = " ".join(words[:2]) + char + " ".join(words[2:])
        return "".join(line + "\n" for line in lines).encode()

    def crlf(lines):
        return "".join(line + "\r\n" for line in lines).encode()

    edit = {
        "test_2016_flickr.de.gz": with_separators,
        "test_2016_flickr.en.gz": with_separators,
        "val.en.gz": crlf,
        "val.de.gz": crlf,
    }
    src = multi30k_files(tmp_path / "src", edit=edit)
    test_de = read_lines(MULTI30K / "test_2016_flickr.de.gz")[:50]
    for bpe in ("subword_nmt", "sentencepiece"):
        out = tmp_path / bpe / "multi30k.en-de"
        run("multi30k.sh", "--src-dir", str(src), "--out", str(out), "--bpe", bpe, *FAST, cwd=tmp_path)
        check_output(out, "en", "de", {"train": 1200, "valid": 60, "test": 50})
        raw = read_lines(out / "raw" / "test.de")
        assert len(raw) == 50 and raw[1] == with_separators(test_de).decode().split("\n")[1]
        assert "\u2028" in raw[1] and "\u0085" in raw[4] and "\r" not in raw[7]  # a lone \r: a space
        assert read_lines(out / "raw" / "valid.en") == read_lines(MULTI30K / "val.en.gz")[:60]


def test_bytes_that_are_not_utf8_are_named_with_file_and_line(tmp_path):
    """Issue 13.6: a Latin-1 byte in Multi30k gave a sacremoses traceback."""

    def latin1_at_801(lines):
        data = "".join(line + "\n" for line in lines).encode()
        lines = data.split(b"\n")
        lines[800] = lines[800].replace(b" ", " caf\xe9 ".encode("latin-1"), 1)
        return b"\n".join(lines)

    src = multi30k_files(tmp_path / "src", edit={"train.de.gz": latin1_at_801})
    column = len(read_lines(MULTI30K / "train.de.gz")[800].split(" ")[0]) + 5
    error = fails("multi30k.sh", "--src-dir", str(src), *FAST, cwd=tmp_path)
    assert f"{src}/train.de.gz:train.de: line 801, column {column}: byte 0xe9 is not UTF-8" in error
    assert "must be UTF-8" in error and "Traceback" not in error
    assert not (tmp_path / "data-bin").exists() or not any((tmp_path / "data-bin").iterdir())


@pytest.mark.parametrize(
    "files", [["val.de.gz"], ["test_2016_flickr.en.gz", "test_2016_flickr.de.gz"]], ids=["one-side", "both-sides"]
)
def test_an_empty_file_is_an_error_that_names_it(files, tmp_path):
    """Issue 13.3: an empty split passed data-prep and failed in fairseq later."""
    src = multi30k_files(tmp_path / "src", edit=dict.fromkeys(files, lambda lines: b""))
    error = fails("multi30k.sh", "--src-dir", str(src), *FAST, cwd=tmp_path)
    assert f"{src}/{files[0]}:{files[0][:-3]} is empty" in error
    assert not (tmp_path / "data-bin").exists() or not any((tmp_path / "data-bin").iterdir())


def test_an_out_path_with_a_space_and_an_out_that_links_to_a_folder(tmp_path):
    """generate_argv keeps a path with a space as one argument (the docs' recipe reads it into a bash
    array); an --out that is a link to a folder is followed: the output goes there, the link stays."""
    src = multi30k_files(tmp_path / "src")
    out = tmp_path / "data bin" / "multi30k.en-de"
    run("multi30k.sh", "--src-dir", str(src), "--out", str(out), *FAST, cwd=tmp_path)
    prep = check_output(out, "en", "de", {"train": 1200, "valid": 60, "test": 50})
    recipe = (  # docs/data-prep.md's recipe, printing the array it reads
        'mapfile -t GENERATE < <(python -c "import json,sys; '
        "print(*json.load(open(sys.argv[1]))['generate_argv'], sep='\\n')\" \"$1\")\n"
        'printf "%s\\n" "${GENERATE[@]}"'
    )
    read = subprocess.run(["bash", "-c", recipe, "bash", out / "prep.json"], env=ENV, capture_output=True, text=True)
    assert read.stdout.splitlines() == prep["generate_argv"] and str(out.resolve() / "bpe.codes") in read.stdout
    from fairseq import options

    parsed = options.parse_args_and_arch(
        options.get_generation_parser(), [str(out), "--path", "x.pt", *prep["generate_argv"]]
    )
    assert parsed.bpe_codes == str(out.resolve() / "bpe.codes")

    folder, link = tmp_path / "real folder", tmp_path / "link"
    folder.mkdir()
    link.symlink_to(folder)
    result = run("multi30k.sh", "--src-dir", str(src), "--out", str(link), *FAST, cwd=tmp_path)
    assert f"is a link to {folder}: writing there" in result.stdout
    assert link.is_symlink() and json.loads((folder / "prep.json").read_text())["splits"]["test"] == 50
