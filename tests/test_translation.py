"""The translation models through fairseq's own entry points: small real runs, then generation."""

import copy
import json
import os
import re
import shutil
import socket
import subprocess
import sys

import pytest
import torch
from conftest import (
    ARCHS,
    NO_PREFETCH_THREAD,
    PLUGIN,
    TINY_FLAGS,
    TRAINING,
    build_as_fairseq_train,
    classes_in_checkpoint,
    console,
    fairseq_generate,
    generate_args,
    hypotheses,
    losses,
    run_command,
    train,
    transformer_body,
)

from phm_fairseq.cli import params as phm_params
from phm_fairseq.models.export import densify
from phm_fairseq.modules import count_parameters
from phm_layers.product_rule import max_rows_from_environment


@pytest.fixture(scope="module", params=list(ARCHS))
def trained(request, copy_models):
    """(name, checkpoint, training output) of each model trained on the copy task (conftest)."""
    return request.param, *copy_models[request.param]


def test_copy_task_loss_falls_and_beam_search_copies(trained, copy_task):
    name, checkpoint, log = trained
    curve = losses(log)
    assert curve[-1] < 0.5 * curve[0], f"{name}: training loss {curve}"
    out = fairseq_generate(copy_task, checkpoint, "--batch-size", "32")
    sources = (copy_task.parent / "test.src").read_text().splitlines()
    hyps = hypotheses(out.stdout)
    assert sorted(hyps) == list(range(len(sources))), "every test sentence is translated"
    exact = sum(hyps[i] == sources[i] for i in hyps) / len(sources)
    assert exact >= 0.8, f"{name}: only {exact:.0%} of the copies are exact"


def load(checkpoint):
    from fairseq import checkpoint_utils

    models, _cfg, task = checkpoint_utils.load_model_ensemble_and_task([str(checkpoint)])
    task.load_dataset("test")
    return models[0].eval(), task


def batch_of(task, size):
    dataset = task.dataset("test")
    return dataset.collater([dataset[i] for i in range(size)])["net_input"]


def test_tensorboard_logdir_gets_the_training_curves(trained):
    _name, checkpoint, log = trained
    assert "Please install tensorboardX" not in log
    events = {path.parent.name: path for path in (checkpoint.parent / "tensorboard").glob("*/events.out.tfevents.*")}
    assert set(events) >= {"train", "train_inner", "valid"} and all(p.stat().st_size > 0 for p in events.values())


@pytest.mark.parametrize("trained", ["phm-shared-rule-rank4"], indirect=True)
def test_shared_rule_and_rank_run_as_asked_and_stay_tied_after_loading_and_resuming(trained, copy_task, tmp_path):
    from phm_fairseq.modules import PHMLinear

    name, checkpoint, log = trained
    assert "PHM layer 32->32, n=4: rank 4 factors hold 256 weights, no fewer than the 256 of full-rank S_i" in log
    resumed = train(
        copy_task,
        tmp_path,
        *ARCHS[name],
        "--max-update",
        "310",
        "--restore-file",
        checkpoint.parent / "checkpoint_last.pt",
    )
    assert re.search(r"num_updates[= ]310\b", resumed.stdout + resumed.stderr), "resumed at 300, trained on to 310"
    for path in (checkpoint, tmp_path / "checkpoint_last.pt"):
        model, _task = load(path)
        layers = [m for m in model.modules() if isinstance(m, PHMLinear)]
        assert len(layers) == 12 and all(layer.A is layers[0].A and layer.rank == 4 for layer in layers)
        state = torch.load(path, weights_only=True)["model"]
        assert all(torch.equal(state[key], layers[0].A) for key in state if key.endswith(".A"))


@pytest.mark.parametrize("product", ["factored", "with H"])
def test_beam_search_equals_full_re_decoding_and_incremental_steps_equal_full_pass(trained, product, monkeypatch):
    from fairseq.models import FairseqDecoder

    from phm_fairseq.modules import PHMLinear

    # every hypercomplex map takes one product, whatever the number of rows (decoding takes the
    # factored one on its own when few rows pass)
    monkeypatch.setattr(PHMLinear, "factored_max_rows", 10**9 if product == "factored" else 0)
    _name, checkpoint, _log = trained
    model, task = load(checkpoint)
    net_input = batch_of(task, 8)
    with torch.no_grad():
        encoder_out = model.encoder(net_input["src_tokens"], src_lengths=net_input["src_lengths"])
        prev = net_input["prev_output_tokens"]
        full, _ = model.decoder(prev, encoder_out=encoder_out)
        state = {}
        steps = [
            model.decoder(prev[:, : t + 1], encoder_out=encoder_out, incremental_state=state)[0][:, -1]
            for t in range(prev.size(1))
        ]
    real = prev.ne(task.target_dictionary.pad())  # outputs at padding positions mean nothing
    torch.testing.assert_close(torch.stack(steps, dim=1)[real], full[real], rtol=1e-4, atol=1e-4)

    class FullReDecoding(FairseqDecoder):
        """Not an incremental decoder: fairseq's generator re-decodes the whole prefix each step."""

        def __init__(self, decoder):
            super().__init__(decoder.dictionary)
            self.inner = decoder

        def forward(self, prev_output_tokens, encoder_out=None, **kwargs):
            return self.inner(prev_output_tokens, encoder_out=encoder_out)

        def max_positions(self):
            return self.inner.max_positions()

    redecoding = copy.copy(model)
    redecoding.decoder = FullReDecoding(model.decoder)
    generate = lambda m: task.build_generator([m], type("Args", (), {"beam": 5, "lenpen": 0.6})()).generate(  # noqa: E731
        [m], {"net_input": net_input}
    )
    for incremental, full_hyps in zip(generate(model), generate(redecoding)):
        assert [h["tokens"].tolist() for h in incremental] == [h["tokens"].tolist() for h in full_hyps]
        torch.testing.assert_close(
            torch.stack([h["score"] for h in incremental]),
            torch.stack([h["score"] for h in full_hyps]),
            rtol=1e-4,
            atol=1e-4,
        )


def test_the_product_path_does_not_change_what_is_decoded(trained, monkeypatch):
    from phm_fairseq.modules import PHMLinear

    _name, checkpoint, _log = trained
    model, task = load(checkpoint)
    net_input = batch_of(task, 3)
    decoded = {}
    for product, limit in (("factored", 10**9), ("with H", 0)):
        monkeypatch.setattr(PHMLinear, "factored_max_rows", limit)
        generator = task.build_generator([model], type("Args", (), {"beam": 5, "lenpen": 0.6})())
        with torch.no_grad():
            decoded[product] = generator.generate([model], {"net_input": net_input})
    for factored, with_h in zip(decoded["factored"], decoded["with H"]):
        assert [h["tokens"].tolist() for h in factored] == [h["tokens"].tolist() for h in with_h]
        torch.testing.assert_close(
            torch.stack([h["score"] for h in factored]), torch.stack([h["score"] for h in with_h]), rtol=1e-5, atol=1e-5
        )


def test_torchscript_export_of_the_dense_equivalent(trained):
    _name, checkpoint, _log = trained
    model, task = load(checkpoint)
    scripted = torch.jit.script(densify(copy.deepcopy(model)))
    batch = batch_of(task, 4)
    with torch.no_grad():
        expected = model(**batch)[0]
        torch.testing.assert_close(
            scripted(batch["src_tokens"], batch["src_lengths"], batch["prev_output_tokens"])[0],
            expected,
            rtol=1e-4,
            atol=1e-4,
        )


def test_densify_keeps_the_function_and_drops_every_hypercomplex_layer(trained):
    from phm_fairseq.modules import PHMLinear

    _name, checkpoint, _log = trained
    model, task = load(checkpoint)
    dense = densify(copy.deepcopy(model))
    assert not any(isinstance(m, PHMLinear) for m in dense.modules())
    batch = batch_of(task, 4)
    with torch.no_grad():
        torch.testing.assert_close(dense(**batch)[0], model(**batch)[0], rtol=1e-5, atol=1e-5)


# --- a real corpus through every command a user runs -------------------------------------------


def test_multi30k_training_learns(multi30k_phm):
    _save_dir, log = multi30k_phm
    curve = losses(log)
    valid = losses(log, tag="valid")
    assert curve[-1] < 0.75 * curve[0] and valid[-1] < valid[0], (curve, valid)


def test_resume_from_checkpoint_continues_the_run(multi30k_phm, multi30k_bpe, tmp_path):
    save_dir, _log = multi30k_phm
    shutil.copy(save_dir / "checkpoint_last.pt", tmp_path)  # the shared run stays as it is
    resumed = train(multi30k_bpe, tmp_path, *ARCHS["phm-n4-fused"], "--max-update", "320")
    log = resumed.stdout + resumed.stderr
    assert "Loaded checkpoint" in log and "(epoch" in log
    assert re.search(r"num_updates[= ]320\b", log), "training continued from update 300 to 320"


def interactive(data, checkpoint, sentences: str, env=None):
    """fairseq-interactive with the plugin, on raw sentences (data-prep's Moses tokenizer and BPE)."""
    command = [console("fairseq-interactive"), data, *NO_PREFETCH_THREAD, "--user-dir", PLUGIN, "--path", checkpoint]
    command += ["--beam", "5", "--source-lang", "en", "--target-lang", "de", *generate_args(data)]
    return subprocess.run(
        list(map(str, command)), input=sentences, capture_output=True, text=True, timeout=300, env=env
    )


def test_generate_and_interactive_load_the_checkpoint_safely(multi30k_phm, multi30k_bpe):
    save_dir, _log = multi30k_phm
    checkpoint = save_dir / "checkpoint_last.pt"
    out = fairseq_generate(multi30k_bpe, checkpoint)
    assert len(hypotheses(out.stdout)) == 100 and "BLEU4" in out.stdout
    result = interactive(multi30k_bpe, checkpoint, "A man is riding a bike.\nTwo dogs play in the snow.\n")
    assert result.returncode == 0, result.stderr[-3000:]
    assert len(re.findall(r"^H-\d+\t", result.stdout, flags=re.M)) == 2


def test_interactive_translation_is_the_same_on_either_product(multi30k_phm, multi30k_bpe):
    """fairseq-interactive decodes one sentence at a time (beam 5: five rows a step) and needs no flag
    for the factored product. At these small sizes the measured crossover keeps H, so each product
    is forced through the environment, as a user would force it."""
    save_dir, _log = multi30k_phm
    translations = {}
    for rows in ("1000000", "0"):
        result = interactive(
            multi30k_bpe,
            save_dir / "checkpoint_last.pt",
            "A man is riding a bike.\nTwo dogs play in the snow.\nA woman reads a book.\n",
            env={**os.environ, "PHM_FACTORED_MAX_ROWS": rows},
        )
        assert result.returncode == 0, result.stderr[-3000:]
        translations[rows] = re.findall(r"^H-(\d+)\t(\S+)\t(.*)$", result.stdout, flags=re.M)
    factored, with_h = translations["1000000"], translations["0"]
    assert len(factored) == 3 and [(i, text) for i, _, text in factored] == [(i, text) for i, _, text in with_h]
    assert all(abs(float(a) - float(b)) < 1e-3 for (_, a, _), (_, b, _) in zip(factored, with_h))


def test_the_environment_sets_the_rows_of_the_factored_product(monkeypatch):
    for value, rows in (("64", 64), ("0", 0), (" ", None)):
        monkeypatch.setenv("PHM_FACTORED_MAX_ROWS", value)
        assert max_rows_from_environment() == rows
    monkeypatch.setenv("PHM_FACTORED_MAX_ROWS", "many")
    with pytest.raises(ValueError, match="PHM_FACTORED_MAX_ROWS='many': expected a number of rows"):
        max_rows_from_environment()
    # read once, when the layers are imported (a command such as fairseq-generate sets it before)
    code = "from phm_fairseq.modules import PHMLinear; print(PHMLinear(512, 2048, n=4).factored_rows().stop - 1)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env={**os.environ, "PHM_FACTORED_MAX_ROWS": "64"})  # fmt: skip
    assert out.stdout.split()[-1] == "64", out.stderr


def test_checkpoints_open_without_the_plugin_and_fairseq_needs_it_to_build_the_model(multi30k_phm, multi30k_bpe):
    """A checkpoint holds no class of the plugin: torch alone opens it once argparse.Namespace is
    allowed (what the plugin's import allows, and fairseq 0.12 needs on torch >= 2.6: without it
    every fairseq checkpoint fails to load, stock ones too); building the model needs --user-dir."""
    save_dir, _log = multi30k_phm
    checkpoint = save_dir / "checkpoint_last.pt"
    assert classes_in_checkpoint(checkpoint) == ["argparse.Namespace"]
    inspect = (
        "import argparse, sys, torch\n"
        "sys.modules['phm_fairseq'] = None  # the plugin cannot be imported\n"
        "try:\n"
        "    torch.load(sys.argv[1], weights_only=True)\n"
        "except Exception as error:\n"
        "    print('refused:', 'argparse.Namespace' in str(error))\n"
        "with torch.serialization.safe_globals([argparse.Namespace]):\n"
        "    state = torch.load(sys.argv[1], weights_only=True)\n"
        "print(state['cfg']['model'].arch, len(state['model']))\n"
    )
    out = run_command(sys.executable, "-c", inspect, checkpoint)
    assert out.stdout.split("\n")[:2] == [
        "refused: True",
        f"phm_transformer_demo {len(torch.load(checkpoint)['model'])}",
    ]
    generate = run_command(
        console("fairseq-generate"),
        multi30k_bpe,
        *NO_PREFETCH_THREAD,
        "--path",
        checkpoint,
        "--gen-subset",
        "test",
        check=False,
    )
    assert generate.returncode != 0 and "argparse.Namespace" in generate.stderr  # torch's refusal, see troubleshooting


def test_checkpoint_of_another_model_is_refused(multi30k_phm, multi30k_bpe, tmp_path):
    save_dir, _log = multi30k_phm
    out = train(
        multi30k_bpe,
        tmp_path,
        *ARCHS["dense-twin"],
        "--max-update",
        "1",
        "--restore-file",
        save_dir / "checkpoint_last.pt",
        check=False,
    )
    assert out.returncode != 0 and "please ensure that the architectures match" in out.stderr


@pytest.mark.parametrize(
    "flags,message",
    [
        (
            ["--phm-n", "3"],
            r"--phm-n 3 must divide every feature size of the model, but does not divide "
            r"--encoder-embed-dim 32, --decoder-embed-dim 32, --encoder-ffn-embed-dim 64, "
            r"--decoder-ffn-embed-dim 64; with these sizes --phm-n can be one of \[1, 2, 4, 8, 16, 32\]",
        ),
        (
            ["--phm-n", "4", "--phm-rule", "algebra-frozen", "--phm-n", "6"],
            r"no Cayley-Dickson algebra of dimension n=6",
        ),
        (
            ["--phm-n", "4", "--quant-noise-pq", "0.1"],
            r"--quant-noise-pq 0.1: quantization noise .* cannot be honoured",
        ),
        (
            ["--phm-rule", "algebra-frozen", "--phm-shared-rule", "side"],
            r"--phm-n 4 --phm-rule algebra-frozen --phm-shared-rule side: .* a frozen rule is a constant",
        ),
        (["--phm-rank", "0"], r"--phm-rank 0: PHM rank must be a positive integer"),
        (
            ["--quaternion-attention"],
            r"--quaternion-attention is an option of quaternion models, and this model is phm",
        ),
        (
            ["--phm-shared-rule", "qkv"],
            r"shared_rule='qkv' ties the A of each self-attention's Q, K and V maps, and this model has no "
            r"self-attention that projects them by three PHM maps: pass --qkv-projection separate",
        ),
        (
            ["--qkv-projection", "separate", "--fused-qkv-init", "per-projection"],
            r"--fused-qkv-init per-projection initialises the fused Q, K, V projection, and this model projects "
            r"Q, K and V separately \(--qkv-projection separate\), each at fairseq's own variance: leave it out",
        ),
        (
            ["--linear-kind", "dense", "--phm-rank", "8"],
            r"--phm-rank 8: --phm-rank is an option of PHM models, and this model is dense \(--linear-kind dense\): "
            r"leave it out, or pass --linear-kind phm",
        ),
    ],
)
def test_bad_flags_are_refused_with_a_clear_message(copy_task, flags, message):
    with pytest.raises(ValueError, match=message):
        build_as_fairseq_train(copy_task, "--arch", "phm_transformer_demo", *flags)


def test_fused_qkv_init_reaches_every_self_attention_and_only_the_initialisation(copy_task):
    from phm_fairseq.models.attention import HypercomplexMultiheadAttention

    def self_attentions(model):
        return [m for m in model.modules() if isinstance(m, HypercomplexMultiheadAttention) and m.self_attention]

    default, _ = build_as_fairseq_train(copy_task, "--arch", "phm_transformer_demo")
    per_projection, _ = build_as_fairseq_train(
        copy_task, "--arch", "phm_transformer_demo", "--fused-qkv-init", "per-projection"
    )
    assert self_attentions(per_projection.encoder) and self_attentions(per_projection.decoder)
    for m in self_attentions(default):
        assert m.fused_qkv_gain == pytest.approx(2**-0.5)  # fairseq's Q, K, V gain over the whole d -> 3d map
    for m in self_attentions(per_projection):
        assert m.fused_qkv_gain == pytest.approx(1.0)  # sqrt(4d / 2d) times it: each third at a d -> d map's variance
    assert {k: v.shape for k, v in default.state_dict().items()} == {
        k: v.shape for k, v in per_projection.state_dict().items()
    }


def test_a_rule_shared_by_q_k_and_v_gives_the_fused_maps_parameter_count(copy_task):
    count = lambda model: count_parameters(model).total  # noqa: E731
    fused, _ = build_as_fairseq_train(copy_task, "--arch", "phm_transformer_demo")
    separate, _ = build_as_fairseq_train(copy_task, "--arch", "phm_transformer_demo", "--qkv-projection", "separate")
    aligned, _ = build_as_fairseq_train(
        copy_task, "--arch", "phm_transformer_demo", "--qkv-projection", "separate", "--phm-shared-rule", "qkv"
    )
    self_attentions = [m for m in aligned.modules() if getattr(m, "self_attention", False)]
    assert self_attentions and all(m.k_proj.A is m.q_proj.A is m.v_proj.A for m in self_attentions)
    assert count(aligned) == count(fused) == count(separate) - len(self_attentions) * 2 * 4**3


@pytest.mark.slow
def test_fairseq_train_stops_at_a_refusal_and_saves_nothing(copy_task, tmp_path):
    """The refusals above are the model's own (build_model): fairseq-train ends on one before it saves."""
    out = train(copy_task, tmp_path, "--arch", "phm_transformer_demo", "--phm-n", "3", "--max-update", "1", check=False)
    assert out.returncode != 0 and "--phm-n 3 must divide every feature size of the model" in out.stderr
    assert not list(tmp_path.glob("*.pt")), "nothing was saved"


@pytest.mark.parametrize(
    "arch,flags,message",
    [
        (
            "quaternion_transformer_demo",
            ["--phm-n", "4", "--phm-shared-rule", "model"],
            r"--phm-n 4 --phm-shared-rule model: --phm-n, --phm-shared-rule are options of PHM models, "
            r"and this model is quaternion",
        ),
        ("transformer_twin_demo", ["--phm-n", "4"], r"--phm-n is an option of PHM models, and this model is dense"),
        (
            "quaternion_transformer_demo",
            ["--quaternion-attention", "--qkv-projection", "fused"],
            r"--quaternion-attention with --qkv-projection fused: .* misaligned components\. "
            r"Pass --qkv-projection separate",
        ),
    ],
)
def test_flags_that_do_not_apply_to_the_kind_are_refused(copy_task, arch, flags, message, capsys):
    with pytest.raises(SystemExit) as exit:
        phm_params.main([str(copy_task), "--task", "translation", "--arch", arch, *flags])
    err = capsys.readouterr().err
    assert exit.value.code != 0 and re.search(message, err), err[-2000:]


def test_quaternion_attention_needs_heads_that_split_components(copy_task):
    with pytest.raises(
        ValueError, match="--encoder-embed-dim 36 must be a multiple of 4 x --encoder-attention-heads 2"
    ):
        build_as_fairseq_train(
            copy_task,
            "--arch",
            "quaternion_transformer_demo",
            "--quaternion-attention",
            "--encoder-embed-dim",
            "36",
            "--decoder-embed-dim",
            "36",
        )


# --- parameter counts against the formula ------------------------------------------------------


def parameters(capsys, data, *flags) -> dict:
    """phm-params --json of a translation model, in this process."""
    phm_params.main(["--json", str(data), "--task", "translation", *flags])
    return json.loads(capsys.readouterr().out.strip().splitlines()[-1])


@pytest.mark.parametrize(
    "arch,flags,expected",
    [
        ("transformer_twin_iwslt", [], transformer_body(256, 1024, 2)),
        ("phm_transformer_iwslt", ["--phm-n", "4"], transformer_body(256, 1024, 2, n=4)),
        (
            "phm_transformer_iwslt",
            ["--phm-n", "8", "--qkv-projection", "separate"],
            transformer_body(256, 1024, 2, n=8, fused=False),
        ),
        (
            "phm_transformer_iwslt",
            ["--phm-n", "4", "--phm-rule", "algebra-frozen"],
            transformer_body(256, 1024, 2, quaternion=True, fused=True),
        ),
        ("quaternion_transformer_iwslt", [], transformer_body(256, 1024, 2, quaternion=True, fused=False)),
        (
            "quaternion_transformer_partial_iwslt",
            [],
            transformer_body(256, 1024, 2, quaternion=True, fused=False, phm_ffn=False),
        ),
        ("phm_transformer_base", ["--phm-n", "16"], transformer_body(512, 2048, 4, n=16)),
        (
            "phm_transformer_iwslt",
            ["--phm-n", "8", "--phm-shared-rule", "model"],
            transformer_body(256, 1024, 2, n=8, shared_rules=1),
        ),
        (
            "phm_transformer_iwslt",
            ["--phm-n", "8", "--phm-shared-rule", "side"],
            transformer_body(256, 1024, 2, n=8, shared_rules=2),
        ),
        ("phm_transformer_iwslt", ["--phm-n", "4", "--phm-rank", "8"], transformer_body(256, 1024, 2, n=4, rank=8)),
        (
            "phm_transformer_base",
            ["--phm-n", "16", "--phm-rank", "8", "--phm-shared-rule", "side", "--qkv-projection", "separate"],
            transformer_body(512, 2048, 4, n=16, rank=8, shared_rules=2, fused=False),
        ),
    ],
)
def test_parameter_counts_match_the_formula(copy_task, arch, flags, expected, capsys):
    counts = parameters(capsys, copy_task, "--arch", arch, "--share-all-embeddings", *flags)
    assert counts["without_embeddings"] == expected
    assert counts["dense_without_embeddings"] == transformer_body(
        *{"iwslt": (256, 1024, 2), "base": (512, 2048, 4)}[arch.rsplit("_", 1)[1]]
    )


def test_phm_n4_has_about_a_quarter_of_the_dense_weights(copy_task, capsys):
    counts = {}
    for arch, flags in (("phm_transformer_iwslt", ["--phm-n", "4"]), ("transformer_twin_iwslt", [])):
        counts[arch] = parameters(capsys, copy_task, "--arch", arch, *flags)["without_embeddings"]
    assert 0.25 < counts["phm_transformer_iwslt"] / counts["transformer_twin_iwslt"] < 0.26


# --- data-parallel training ---------------------------------------------------------------------


def free_port() -> int:
    """A port of 127.0.0.1 that the OS finds free now."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def two_process_training(data, save_dir, port: int) -> list:
    """fairseq-train of PHM n=4 as two gloo processes that meet at 127.0.0.1:``port``, 20 updates:
    [(exit code, output)] of rank 0 and rank 1."""
    common = [
        console("fairseq-train"),
        data,
        "--save-dir",
        save_dir,
        *TRAINING,
        *TINY_FLAGS,
        *ARCHS["phm-n4-fused"],
        "--max-update",
        "20",
        "--distributed-backend",
        "gloo",
        "--distributed-init-method",
        f"tcp://127.0.0.1:{port}",
        "--distributed-world-size",
        "2",
        "--distributed-no-spawn",
        "--ddp-backend",
        "legacy_ddp",
        "--cpu",
    ]
    one_thread = {**os.environ, "OMP_NUM_THREADS": "1"}  # two processes share the cores
    logs = [save_dir / f"rank{rank}.log" for rank in (0, 1)]
    ranks = []
    for rank, log in enumerate(logs):
        with open(log, "w") as output:  # a file, not a pipe: a rank never waits for its reader
            command = [*map(str, common), "--distributed-rank", str(rank)]
            ranks.append(subprocess.Popen(command, stdout=output, stderr=subprocess.STDOUT, env=one_thread))
    try:
        codes = [ranks[0].wait(timeout=600)]
        if "EADDRINUSE" in logs[0].read_text():  # rank 1 would wait for a rank 0 that is gone
            ranks[1].kill()
        codes.append(ranks[1].wait(timeout=600))
    finally:
        for process in ranks:
            process.kill()
            process.wait()
    return [(code, log.read_text()) for code, log in zip(codes, logs)]


@pytest.mark.slow
def test_two_process_gloo_training(copy_task, tmp_path):
    # Rank 0 listens on a port that the OS found free; another process may take it before rank 0 has
    # started (seconds of imports): rank 0 then stops at once (EADDRINUSE), and both start again on another.
    for _attempt in range(3):
        (code0, log0), (code1, log1) = two_process_training(copy_task, tmp_path, free_port())
        if "EADDRINUSE" not in log0:
            break
    assert [code0, code1] == [0, 0], log0[-3000:] + log1[-3000:]
    assert "distributed init (rank 1)" in log1 and "num_updates 20" in log0
    assert (tmp_path / "checkpoint_last.pt").exists()
