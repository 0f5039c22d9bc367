"""phm-export: a PHM Transformer as fairseq's own transformer, used where the plugin cannot be imported,
and as a CTranslate2 model; the hub interface with and without the plugin."""

import contextlib
import copy
import io
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from conftest import ARCHS, REPO, TINY_FLAGS, console, fairseq_generate, generate_args, hypotheses

import phm_fairseq
from phm_fairseq.cli import export as export_cli

PLUGIN = phm_fairseq.__path__[0]

# A process of this environment that cannot import the plugin: -I leaves out the working directory,
# PYTHONPATH and user site-packages, and the finder below stops the editable install's own finder.
NO_PLUGIN = """
import sys

class NoPlugin:
    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] == "phm_fairseq":
            raise ImportError(f"{name}: this process stands for one where the plugin is not installed")

sys.meta_path.insert(0, NoPlugin())
"""


def without_plugin(code: str, cwd, stdin=None) -> str:
    """Runs ``code`` in a Python process that cannot import phm_fairseq; returns its stdout."""
    env = {key: value for key, value in os.environ.items() if not key.startswith("TORCH_FORCE")}  # safe loading
    result = subprocess.run(
        [sys.executable, "-I", "-c", NO_PLUGIN + code + "\nassert 'phm_fairseq' not in sys.modules\n"],
        cwd=cwd,
        env=env,
        input=stdin,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, result.stderr[-4000:]
    return result.stdout


def fairseq_cli(module: str, *argv) -> str:
    """Code that runs fairseq's command ``module`` (fairseq_cli.generate, ...) with ``argv``."""
    return f"from {module} import cli_main\nsys.argv = {['fairseq', *map(str, argv)]!r}\ncli_main()\n"


def phm_export(*argv):
    """phm-export in this process: (exit code, stdout, stderr)."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = export_cli.main([str(a) for a in argv])
        except SystemExit as exit:  # argparse's refusals
            code = exit.code
    return code, out.getvalue(), err.getvalue()


def exported(checkpoint, out, *flags):
    code, stdout, stderr = phm_export(checkpoint, "--out", out, *flags, "--json")
    assert code == 0, stderr[-3000:]
    return json.loads(stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def corpus(multi30k_bpe):
    """2,000 Multi30k en-de pairs through data-prep/multi30k.sh (conftest)."""
    return multi30k_bpe


@pytest.fixture(scope="module")
def phm(multi30k_phm):
    """A tiny PHM-Transformer (n=4, fused Q/K/V) trained on the corpus (conftest): its checkpoint."""
    return multi30k_phm[0] / "checkpoint_best.pt"


@pytest.fixture(scope="module")
def dense(phm, tmp_path_factory):
    out = tmp_path_factory.mktemp("exported") / "dense.pt"
    return out, exported(phm, out)


def raw_test_sentences(corpus, count=None) -> list:
    return (corpus / "raw" / "test.en").read_text(encoding="utf-8").splitlines()[:count]


def differing(a: list, b: list) -> int:
    assert len(a) == len(b)
    return sum(x != y for x, y in zip(a, b))


def hub_translations(directory, checkpoint_file, corpus, sentences) -> str:
    """Code that loads a checkpoint with fairseq's hub interface (no user_dir) and prints its translations as JSON."""
    return (
        "import json\nfrom fairseq.models.transformer import TransformerModel\n"
        f"hub = TransformerModel.from_pretrained({str(directory)!r}, checkpoint_file={checkpoint_file!r}, "
        f"data_name_or_path={str(corpus)!r}, bpe='subword_nmt', bpe_codes={str(corpus / 'bpe.codes')!r}, "
        "tokenizer='moses')\n"
        f"print(json.dumps(hub.translate({sentences!r}, beam=5, lenpen=0.6)))\n"
    )


@pytest.fixture(scope="module")
def phm_hub(phm, corpus):
    """The PHM checkpoint's translations of the test sentences through the hub interface, with user_dir."""
    from fairseq.models.transformer import TransformerModel

    hub = TransformerModel.from_pretrained(
        str(phm.parent),
        checkpoint_file=phm.name,
        data_name_or_path=str(corpus),
        bpe="subword_nmt",
        bpe_codes=str(corpus / "bpe.codes"),
        tokenizer="moses",
        user_dir=PLUGIN,
    )
    return hub.translate(raw_test_sentences(corpus), beam=5, lenpen=0.6)


@pytest.mark.slow
def test_the_export_is_fairseqs_transformer_with_plain_configuration(phm, dense):
    from fairseq.models import ARCH_MODEL_NAME_REGISTRY

    out, report = dense
    state = torch.load(out, weights_only=True)  # nothing in it needs an allowed class
    model_args = state["cfg"]["model"]
    assert type(model_args) is dict and ARCH_MODEL_NAME_REGISTRY[model_args["arch"]] == "transformer"
    assert not {"linear_kind", "phm_n", "qkv_projection"} & set(model_args) and model_args["user_dir"] is None
    assert state["cfg"]["common"]["user_dir"] is None and "last_optimizer_state" not in state
    assert list(state["optimizer_history"][-1]) == [
        "criterion_name",
        "optimizer_name",
        "lr_scheduler_state",
        "num_updates",
    ]
    keys = set(state["model"])
    assert {"encoder.layers.0.self_attn.q_proj.weight", "decoder.layers.0.fc1.weight"} <= keys
    assert not [key for key in keys if key.endswith((".A", ".S")) or "qkv_proj" in key]
    # embeddings (tied) are copied; each layer map holds n = 4 times the weights of its PHM layer
    before, after = report["parameters"]["hypercomplex"], report["parameters"]["exported"]
    assert after["total"] - after["without_embeddings"] == before["total"] - before["without_embeddings"]
    assert 3 < after["without_embeddings"] / before["without_embeddings"] < 4


@pytest.mark.slow
def test_stock_fairseq_without_the_plugin_translates_as_the_phm_checkpoint(phm, dense, corpus, phm_hub, tmp_path):
    out, _report = dense
    # fairseq-generate on the test split, then the hub interface without user_dir, in one process
    gen = ["--gen-subset", "test", "--beam", "5", "--lenpen", "0.6", "--batch-size", "32"]
    gen += ["--required-batch-size-multiple", "1", *generate_args(corpus)]
    stdout = without_plugin(
        fairseq_cli("fairseq_cli.generate", corpus, "--path", out, *gen)
        + hub_translations(out.parent, out.name, corpus, raw_test_sentences(corpus)),
        cwd=tmp_path,
    )
    stock = hypotheses(stdout)
    theirs = hypotheses(fairseq_generate(corpus, phm, "--batch-size", "32", *generate_args(corpus)).stdout)
    assert len(stock) == len(theirs) == 100
    assert differing([theirs[i] for i in range(100)], [stock[i] for i in range(100)]) == 0
    assert differing(phm_hub, json.loads(stdout.strip().splitlines()[-1])) == 0
    # fairseq-interactive, one sentence at a time
    sentences = "\n".join(raw_test_sentences(corpus, 20)) + "\n"
    interactive = ["--beam", "5", "--lenpen", "0.6", *generate_args(corpus)]
    stock = without_plugin(
        fairseq_cli("fairseq_cli.interactive", corpus, "--path", out, *interactive), tmp_path, sentences
    )
    theirs = subprocess.run(
        [console("fairseq-interactive"), corpus, "--user-dir", PLUGIN, "--path", phm, *interactive],
        input=sentences, capture_output=True, text=True, timeout=600,
    ).stdout  # fmt: skip
    assert len(hypotheses(stock)) == 20 and hypotheses(stock) == hypotheses(theirs)


EXPORTABLE = {
    **{name: flags for name, flags in ARCHS.items() if name != "quaternion-attention"},
    "quaternion": ["--arch", "quaternion_transformer_demo"],
}


@pytest.mark.parametrize("name", list(EXPORTABLE))
def test_every_kind_of_model_loads_strictly_into_fairseqs_transformer_and_computes_the_same(copy_task, name):
    from fairseq import options, tasks
    from fairseq.models.transformer import TransformerModel

    from phm_fairseq.models.export import densify, stock_transformer_args

    argv = [str(copy_task), "--task", "translation", "--share-all-embeddings", *TINY_FLAGS, *EXPORTABLE[name]]
    args = options.parse_args_and_arch(options.get_training_parser(), input_args=argv)
    task = tasks.setup_task(args)
    model = task.build_model(args).eval()
    stock = TransformerModel.build_model(stock_transformer_args(args), task).eval()
    stock.load_state_dict(densify(copy.deepcopy(model)).state_dict(), strict=True)
    task.load_dataset("test")
    batch = task.dataset("test").collater([task.dataset("test")[i] for i in range(8)])["net_input"]
    with torch.no_grad():
        torch.testing.assert_close(stock(**batch)[0], model(**batch)[0], rtol=1e-5, atol=1e-5)


def test_quaternion_attention_has_no_stock_counterpart(copy_task):
    from fairseq import options

    from phm_fairseq.models.export import stock_transformer_args

    argv = [str(copy_task), "--task", "translation", *ARCHS["quaternion-attention"]]
    args = options.parse_args_and_arch(options.get_training_parser(), input_args=argv)
    with pytest.raises(ValueError, match=r"quaternion attention .* has no counterpart in fairseq's transformer"):
        stock_transformer_args(args)


def test_a_process_without_the_plugin_cannot_import_it(tmp_path):
    result = subprocess.run(
        [sys.executable, "-I", "-c", NO_PLUGIN + "import phm_fairseq"], cwd=REPO, capture_output=True, text=True
    )
    assert result.returncode != 0 and "stands for one where the plugin is not installed" in result.stderr


def ctranslate2_translations(model_dir, corpus, sentences) -> list:
    """The pipeline of docs/translation.md: sacremoses and subword-nmt as fairseq's moses tokenizer and
    subword_nmt BPE apply them, CTranslate2's beam search, then BPE removal and detokenization."""
    import ctranslate2
    from sacremoses import MosesDetokenizer, MosesTokenizer
    from subword_nmt.apply_bpe import BPE

    tokenizer, detokenizer = MosesTokenizer(lang="en"), MosesDetokenizer(lang="de")
    with open(corpus / "bpe.codes", encoding="utf-8") as codes:
        bpe = BPE(codes)
    translator = ctranslate2.Translator(str(model_dir), device="cpu")
    tokens = [
        bpe.process_line(tokenizer.tokenize(line, aggressive_dash_splits=True, return_str=True, escape=True)).split()
        for line in sentences
    ]
    results = translator.translate_batch(tokens, beam_size=5, length_penalty=0.6)
    # fairseq's subword_nmt decoding: "@@ " joins a piece to the next; a final piece keeps no "@@"
    return [detokenizer.detokenize((" ".join(r.hypotheses[0]) + " ").replace("@@ ", "").split()) for r in results]


@pytest.mark.slow
def test_ctranslate2_float32_translates_as_fairseq_and_int8_is_smaller(phm, corpus, phm_hub, tmp_path):
    report = exported(phm, tmp_path / "ct2", "--format", "ctranslate2", "--quantization", "float32")
    assert sorted(os.listdir(tmp_path / "ct2")) == ["config.json", "model.bin", "shared_vocabulary.json"]
    ours = ctranslate2_translations(tmp_path / "ct2", corpus, raw_test_sentences(corpus))
    # Same weights, another implementation: float32 sums in another order can only reorder candidates
    # whose scores tie to ~1e-6, which on 100 sentences of this model happened for none (measured);
    # one line in 100 is the most such a near-tie could account for.
    assert differing(phm_hub, ours) <= 1, [(a, b) for a, b in zip(phm_hub, ours) if a != b]
    int8 = exported(phm, tmp_path / "ct2_int8", "--format", "ctranslate2", "--quantization", "int8")
    assert int8["bytes"]["out"] < 0.7 * report["bytes"]["out"]
    assert len(ctranslate2_translations(tmp_path / "ct2_int8", corpus, raw_test_sentences(corpus, 5))) == 5


def test_the_quantizations_are_ctranslate2s():
    from ctranslate2.specs.model_spec import ACCEPTED_MODEL_TYPES

    assert export_cli.QUANTIZATIONS == ACCEPTED_MODEL_TYPES


# --- refusals ---------------------------------------------------------------------------------


def refused(*argv, message, out=None):
    code, _stdout, stderr = phm_export(*argv)
    assert code == 2 and re.search(message, stderr), stderr[-2000:]
    assert out is None or not os.path.exists(out), "nothing was written"


def test_bad_out_is_refused_before_the_work(tmp_path, monkeypatch):
    (tmp_path / "file").write_text("")
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "notes.txt").write_text("mine")
    missing = tmp_path / "nowhere.pt"  # --out is checked before the checkpoint is read
    for out, flags, message in [
        ("", [], r"--out is empty: name the checkpoint file to write"),
        (f"{tmp_path}/new/", [], r"new/ is a directory: name the checkpoint file to write"),
        (tmp_path, [], r"is a directory: name the checkpoint file"),
        (tmp_path / "file" / "out.pt", [], r"file is a file, not a directory"),
        (tmp_path / "file", [], r"file exists: pass --force to overwrite it"),
        (tmp_path / "file", ["--format", "ctranslate2"], r"file is a file: name the directory to write the model into"),
        (tmp_path / "other", ["--format", "ctranslate2", "--force"], r"holds no CTranslate2 model .*not replaced"),
    ]:
        refused(missing, "--out", out, *flags, message=message)
    refused(tmp_path / "file", "--out", tmp_path / "file", "--force", message=r"is the PHM checkpoint itself")
    assert (tmp_path / "other" / "notes.txt").read_text() == "mine"
    monkeypatch.setitem(sys.modules, "ctranslate2", None)  # not installed
    refused(
        missing, "--out", tmp_path / "ct2", "--format", "ctranslate2", message=r"pip install 'phm-fairseq\[export\]'"
    )


def test_what_is_not_a_plugin_translation_checkpoint_is_refused(phm, dense, tmp_path):
    out = tmp_path / "out.pt"
    refused(tmp_path / "nowhere.pt", "--out", out, message=r"nowhere.pt: no such checkpoint file", out=out)
    (tmp_path / "text.pt").write_text("not a checkpoint\n")
    refused(tmp_path / "text.pt", "--out", out, message=r"text.pt cannot be read as a fairseq checkpoint", out=out)
    torch.save({"weights": torch.zeros(3)}, tmp_path / "tensors.pt")
    refused(tmp_path / "tensors.pt", "--out", out, message=r"not a fairseq training checkpoint", out=out)
    refused(dense[0], "--out", out, message=r"holds fairseq's own transformer .* nothing to export", out=out)
    for task, arch, overrides, message in [
        ("nli", "phm_lstm_nli", {}, r"task 'nli' \(arch 'phm_lstm_nli'\); phm-export exports translation Transformers"),
        ("sentence_classification", "phm_transformer_classifier", {}, r"task 'sentence_classification'"),
        ("translation", "lstm", {}, r"holds a 'lstm' model \(arch 'lstm'\), not one of the plugin's translation"),
        (
            "translation",
            "quaternion_transformer_demo",
            {"linear_kind": "quaternion", "quaternion_attention": True, "qkv_projection": "separate"},
            r"has quaternion attention: .* no counterpart in fairseq's transformer",
        ),
    ]:
        state = torch.load(phm, weights_only=True)
        state["cfg"]["task"]["_name"] = task
        state["cfg"]["model"].arch = state["cfg"]["model"]._name = arch
        vars(state["cfg"]["model"]).update(overrides)
        torch.save(state, tmp_path / "other.pt")
        refused(tmp_path / "other.pt", "--out", out, message=message, out=out)
    state = torch.load(phm, weights_only=True)
    state["cfg"]["task"]["data"] = str(tmp_path / "moved")
    torch.save(state, tmp_path / "moved.pt")
    refused(tmp_path / "moved.pt", "--out", out, message=r"'.*moved' does not exist here: pass --data DIR", out=out)


@pytest.mark.parametrize("interruption", ["SIGINT", "error"])
def test_an_interrupted_export_leaves_nothing_and_keeps_what_was_there(
    phm, tmp_path, monkeypatch, interruption, ctrl_c_raises
):
    save = torch.save

    def interrupted(obj, path, *args, **kwargs):
        with open(path, "wb") as f:
            f.write(b"half a checkpoint")
        if interruption == "SIGINT":  # Ctrl-C, as the terminal sends it
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(5)
        raise OSError("No space left on device")

    out = tmp_path / "deep" / "er" / "dense.pt"
    with pytest.raises(KeyboardInterrupt if interruption == "SIGINT" else OSError):
        monkeypatch.setattr(torch, "save", interrupted)
        phm_export(phm, "--out", out)
    assert os.listdir(tmp_path) == [], "neither a partial file nor the directories made for it"
    monkeypatch.setattr(torch, "save", save)
    exported(phm, out)
    before = out.read_bytes()
    with pytest.raises(KeyboardInterrupt if interruption == "SIGINT" else OSError):
        monkeypatch.setattr(torch, "save", interrupted)
        phm_export(phm, "--out", out, "--force")
    assert out.read_bytes() == before and os.listdir(out.parent) == ["dense.pt"]


def test_an_interrupted_ctranslate2_conversion_keeps_the_model_that_was_there(phm, tmp_path, monkeypatch):
    from ctranslate2.converters import FairseqConverter

    out = tmp_path / "ct2"
    exported(phm, out, "--format", "ctranslate2")
    before = {name: (out / name).read_bytes() for name in os.listdir(out)}

    def interrupted(self, output_dir, **kwargs):
        os.makedirs(output_dir)
        (Path(output_dir) / "model.bin").write_bytes(b"half a model")
        raise KeyboardInterrupt

    monkeypatch.setattr(FairseqConverter, "convert", interrupted)
    with pytest.raises(KeyboardInterrupt):
        phm_export(phm, "--out", out, "--format", "ctranslate2", "--quantization", "int8", "--force")
    assert {name: (out / name).read_bytes() for name in os.listdir(out)} == before
    assert os.listdir(tmp_path) == ["ct2"]
