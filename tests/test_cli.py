"""The plugin's console commands (phm-params, phm-evaluate, phm-compress, phm-export), run in this process
on the tiny checkpoints of tests/fixtures: one main for all of them (stdout for the report; a refusal is
`PROG: error: MESSAGE` and exit status 2; the process as it was), and the edges of their inputs and --out."""

import json
import logging
import os
import re
import sys
import warnings
from pathlib import Path

import pytest
import torch

from phm_fairseq.cli import compress, evaluate, export, params

REPO = Path(__file__).resolve().parent.parent
FIXTURES = REPO / "tests" / "fixtures" / "checkpoints"
TRANSLATION = FIXTURES / "data" / "translation"  # the fixtures' dictionaries (their own data path is gone)
NLI = FIXTURES / "data" / "nli"
# the sizes of the fixtures' dense twin, which phm-compress must be told (no architecture has them)
FIXTURE_SIZES = [
    part
    for side in ("encoder", "decoder")
    for key, value in (("layers", 1), ("embed-dim", 16), ("ffn-embed-dim", 32), ("attention-heads", 2))
    for part in (f"--{side}-{key}", str(value))
]
COMMANDS = {"phm-params": params, "phm-evaluate": evaluate, "phm-compress": compress, "phm-export": export}


def run(capsys, prog, *argv):
    """A command in this process: (exit status, stdout, stderr)."""
    try:
        code = COMMANDS[prog].main([str(a) for a in argv])
    except SystemExit as exit:
        code = exit.code
    out, err = capsys.readouterr()
    return code, out, err


def process_state():
    root = logging.getLogger()
    return root.level, list(root.handlers), list(warnings.filters)


@pytest.mark.parametrize("prog", sorted(COMMANDS))
def test_every_command_refuses_a_missing_checkpoint_alike(prog, capsys, tmp_path):
    missing = FIXTURES / "phm_fuse.pt"
    argv = {
        "phm-params": [missing],
        "phm-evaluate": [NLI, "--path", missing],
        "phm-compress": [missing, "--arch", "phm_transformer_demo", "--out", tmp_path / "out.pt"],
        "phm-export": [missing, "--out", tmp_path / "out.pt"],
    }[prog]
    before = process_state()
    code, out, err = run(capsys, prog, *argv)
    assert code == 2 and out == ""
    assert err.startswith(f"{prog}: error: {missing}: no such checkpoint file; the .pt files in {FIXTURES}: ")
    assert err.count("\n") == 1 and "phm_fused.pt" in err, "one line, no traceback, what is there instead"
    assert process_state() == before
    assert os.listdir(tmp_path) == []


def test_a_file_that_is_no_safe_checkpoint_is_refused_with_why(capsys, tmp_path):
    import collections
    import fractions

    torch.save({"model": {}, "cfg": fractions.Fraction(1, 3)}, tmp_path / "unsafe.pt")
    (tmp_path / "text.pt").write_text("not a checkpoint\n")
    (tmp_path / "empty.pt").write_bytes(b"")
    (tmp_path / "cut.pt").write_bytes((FIXTURES / "phm_fused.pt").read_bytes()[:4000])
    torch.save({"weights": torch.zeros(3)}, tmp_path / "tensors.pt")
    torch.save({"model": {}, "cfg": collections.Counter()}, tmp_path / "counter.pt")  # torch allows a Counter
    for name, message in [
        ("unsafe.pt", "not a checkpoint that can be loaded safely: it holds fractions.Fraction, which torch's safe"),
        ("text.pt", "cannot be read as a fairseq checkpoint (truncated, or not a checkpoint)"),
        ("empty.pt", "is empty (0 bytes): not a checkpoint; was it still being written?"),
        ("cut.pt", "cannot be read as a fairseq checkpoint (truncated, or not a checkpoint): RuntimeError: "),
        ("tensors.pt", "not a fairseq training checkpoint (it has no model and configuration)"),
        ("counter.pt", "not a fairseq training checkpoint (it has no model and configuration)"),
    ]:
        code, _out, err = run(capsys, "phm-export", tmp_path / name, "--out", tmp_path / "out.pt")
        assert code == 2 and err.startswith(f"phm-export: error: {tmp_path / name}") and message in err, err
    assert not (tmp_path / "out.pt").exists()


def test_stdout_holds_the_report_alone_and_the_process_is_left_as_it_was(capsys):
    root = logging.getLogger()
    everything = logging.StreamHandler(sys.stderr)  # a process that shows fairseq's INFO lines
    level = root.level
    root.addHandler(everything)
    root.setLevel(logging.DEBUG)
    try:
        before = process_state()
        code, out, err = run(capsys, "phm-params", FIXTURES / "phm_fused.pt", "--data", TRANSLATION, "--json")
        after = process_state()
    finally:
        root.removeHandler(everything)
        root.setLevel(level)
    assert code == 0 and json.loads(out)["total"] == 2752 and out.count("\n") == 1
    assert "dictionary:" not in err, "fairseq's INFO lines (the task's dictionaries) are not shown"
    assert after == before


@pytest.mark.parametrize("arch", ["phm_transformer_demo", "quaternion_transformer_demo"])
def test_phm_params_dense_total_is_the_dense_twins_total_with_phydi(capsys, arch):
    """--phydi's gates (on every attention module and fc2) are in the dense twin too: the dense columns are
    its counts, the fc2 gates included."""

    def counts(arch, *flags):
        argv = [TRANSLATION, "--task", "translation", "--source-lang", "src", "--target-lang", "tgt"]
        code, out, err = run(capsys, "phm-params", *argv, "--arch", arch, *flags, "--json")
        assert code == 0, err
        return json.loads(out)

    twin, ours = counts("transformer_twin_demo", "--phydi"), counts(arch, "--phydi")
    assert (
        twin["total"] == counts("transformer_twin_demo")["total"] + 10
    )  # 2 encoder layers x 2 gates, 2 decoder layers x 3
    assert ours["dense_total"] == twin["total"] and ours["dense_without_embeddings"] == twin["without_embeddings"]


def test_phm_params_reads_a_moved_checkpoint_with_data_and_refuses_data_for_a_new_model(capsys):
    code, _out, err = run(capsys, "phm-params", FIXTURES / "phm_fused.pt")
    assert code == 2 and "does not exist here: pass --data DIR" in err
    code, _out, err = run(capsys, "phm-params", TRANSLATION, "--task", "translation", "--data", TRANSLATION)
    assert code == 2 and "--data applies to a checkpoint" in err


def test_the_task_is_read_as_fairseq_reads_it(capsys, tmp_path):
    """A legacy task's configuration (the plugin's nli) names the task twice; fairseq builds the one
    that "task" names, so that is the one a command checks."""
    state = torch.load(FIXTURES / "phm_lstm_nli.pt", weights_only=True)
    assert state["cfg"]["task"]._name == "nli"
    state["cfg"]["task"].task = "translation"
    torch.save(state, tmp_path / "translation.pt")
    code, _out, err = run(capsys, "phm-evaluate", NLI, "--path", tmp_path / "translation.pt")
    assert code == 2 and "holds a model for task 'translation' (arch 'phm_lstm_nli'); phm-evaluate scores" in err


# --- phm-export ---------------------------------------------------------------------------------


def test_quantization_without_ctranslate2_is_refused_before_any_work(capsys, tmp_path):
    for checkpoint in (FIXTURES / "phm_fused.pt", tmp_path / "missing.pt"):
        code, _out, err = run(
            capsys, "phm-export", checkpoint, "--out", tmp_path / "dense.pt", "--quantization", "int8"
        )
        assert code == 2 and "--quantization int8 applies to --format ctranslate2" in err
    assert os.listdir(tmp_path) == []


def test_force_replaces_a_ctranslate2_model_but_never_a_file_of_yours(capsys, tmp_path):
    out = tmp_path / "ct2"
    common = [FIXTURES / "phm_fused.pt", "--data", TRANSLATION, "--format", "ctranslate2", "--out", out, "--json"]
    code, report, err = run(capsys, "phm-export", *common)
    assert code == 0, err
    assert json.loads(report)["quantization"] == "float32"
    (out / "notes.txt").write_text("mine")
    before = {path.name: path.read_bytes() for path in out.iterdir()}
    code, _out, err = run(capsys, "phm-export", *common, "--quantization", "int8", "--force")
    assert code == 2 and f"--out {out} holds notes.txt beside its CTranslate2 model: not replaced" in err
    assert {path.name: path.read_bytes() for path in out.iterdir()} == before
    (out / "notes.txt").unlink()
    code, report, err = run(capsys, "phm-export", *common, "--quantization", "int8", "--force")
    assert code == 0 and json.loads(report)["quantization"] == "int8", err
    assert sorted(os.listdir(out)) == ["config.json", "model.bin", "shared_vocabulary.json"]
    assert (out / "model.bin").stat().st_size < len(before["model.bin"]), "int8 weights replaced float32 ones"


def without_languages(name: str, tmp_path) -> Path:
    """A fixture whose configuration names no language pair (fairseq then infers it from the data's files)."""
    state = torch.load(FIXTURES / name, weights_only=True)
    state["cfg"]["task"]["source_lang"] = state["cfg"]["task"]["target_lang"] = None
    torch.save(state, tmp_path / name)
    return tmp_path / name


@pytest.mark.parametrize(
    "prog, name, flags",
    [
        ("phm-export", "phm_fused.pt", []),
        ("phm-compress", "dense_twin.pt", ["--arch", "phm_transformer_demo", *FIXTURE_SIZES]),
    ],
)
def test_the_data_of_another_task_is_refused_with_what_it_lacks(prog, name, flags, capsys, tmp_path):
    out = tmp_path / "out.pt"
    code, _out, err = run(capsys, prog, FIXTURES / name, "--data", NLI, "--out", out, *flags)
    assert code == 2 and out.exists() is False
    assert (
        f"--data {NLI} has no dict.src.txt or dict.tgt.txt, the dictionaries of the model's language pair src-tgt"
        in err
    )
    code, _out, err = run(capsys, prog, without_languages(name, tmp_path), "--data", NLI, "--out", out, *flags)
    assert code == 2 and f"--data {NLI} holds no translation data" in err and "pass --data DIR" in err
    code, _out, err = run(capsys, prog, without_languages(name, tmp_path), "--data", TRANSLATION, "--out", out, *flags)
    assert code == 2 and "holds no translation data" in err, "no files that name the pair: fairseq cannot infer it"


@pytest.mark.parametrize(
    "prog, flags",
    [
        ("phm-export", []),
        ("phm-export", ["--format", "ctranslate2"]),
        ("phm-compress", ["--arch", "phm_transformer_demo"]),
    ],
)
def test_an_out_under_a_symbolic_link_to_nothing_is_refused_before_reading(prog, flags, capsys, tmp_path):
    link = tmp_path / "link"
    link.symlink_to(tmp_path / "gone")
    missing = tmp_path / "missing.pt"  # --out is checked before the checkpoint is read
    for out in (link / "model", link / "deeper" / "model", link):
        code, _out, err = run(capsys, prog, missing, "--out", out, *flags)
        assert (
            code == 2 and f"--out {out}: {link} is a symbolic link to {tmp_path / 'gone'}, which does not exist" in err
        )
    assert os.listdir(tmp_path) == ["link"] and link.is_symlink()


# --- phm-compress's examples ----------------------------------------------------------------------


def compress_examples() -> list:
    """(command line, dense architecture) of each complete phm-compress example of docs/compress.md and
    phm-compress --help: the dense model is the one a comment above names, else the dense twin of the
    size that --arch names (what both say: transformer_twin_demo to the *_demo architectures, ...)."""
    examples, dense = [], None
    for line in ((REPO / "docs" / "compress.md").read_text() + compress.__doc__).splitlines():
        line = line.strip()
        named = re.search(r"^# .*\b(transformer_twin_\w+)", line)
        if named or not line:
            dense = named and named.group(1)
        elif line.startswith("phm-compress ") and not re.search(r"\[|\.\.\.|\\$", line):
            size = re.search(r"--arch \w+_(\w+)", line).group(1)
            examples.append((line, dense or f"transformer_twin_{size}"))
    return examples


def test_the_examples_take_an_architecture_of_the_dense_models_size():
    from fairseq.models import ARCH_CONFIG_REGISTRY

    examples = compress_examples()
    assert ("transformer_twin_demo", "phm_transformer_demo") in {(d, line.split()[3]) for line, d in examples}
    for line, dense in examples:
        args = compress.parse_args(line.split()[1:])
        given = compress.check_target(args)
        dense_args = argparse_namespace(arch=dense)
        ARCH_CONFIG_REGISTRY[dense](dense_args)
        compress.check_sizes("DENSE.pt", dense_args, args.arch, given)


def argparse_namespace(**values):
    import argparse

    return argparse.Namespace(**values)


@pytest.fixture(scope="module")
def demo_twin(tmp_path_factory):
    """A dense twin of the demo size (the README's dense model), untrained, as a fairseq checkpoint."""
    from fairseq import options, tasks

    argv = [str(TRANSLATION), "--task", "translation", "--source-lang", "src", "--target-lang", "tgt"]
    argv += ["--arch", "transformer_twin_demo", "--share-all-embeddings"]
    args = options.parse_args_and_arch(options.get_training_parser(), input_args=argv)
    torch.manual_seed(1)
    model = tasks.setup_task(args).build_model(args)
    state = torch.load(FIXTURES / "dense_twin.pt", weights_only=True)
    state["cfg"]["model"] = argparse_namespace(**vars(args))
    state["cfg"]["task"]["data"] = str(TRANSLATION)
    state["model"] = model.state_dict()
    path = tmp_path_factory.mktemp("demo") / "checkpoint_best.pt"
    torch.save(state, path)
    return path


def test_the_readme_dense_model_compresses_to_the_demo_architecture(demo_twin, capsys, tmp_path):
    out = tmp_path / "phm_n4.pt"
    code, _out, err = run(
        capsys, "phm-compress", demo_twin, "--arch", "phm_transformer_iwslt", "--phm-n", "4", "--out", out
    )
    assert code == 2 and re.search(r"has other sizes than phm_transformer_iwslt: .*phm_transformer_demo has the", err)
    code, report, err = run(
        capsys, "phm-compress", demo_twin, "--arch", "phm_transformer_demo", "--phm-n", "4", "--out", out, "--json"
    )
    assert code == 0, err
    assert json.loads(report)["model_flags"] == ["--arch", "phm_transformer_demo", "--phm-n", "4"]
    assert torch.load(out, weights_only=True)["cfg"]["model"].arch == "phm_transformer_demo"
