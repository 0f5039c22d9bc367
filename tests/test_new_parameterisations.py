"""Issue 56's parameterisations: PHM plus an unshared low-rank term (--phm-lowrank), normalised factors with
learned gains (--phm-factor-norm), and PHM only in the feed-forward layers (--dense-attention).

The layer tests that every PHMLinear option passes (both products, gradients, autocast, compile, meta devices)
hold these too: LAYERS of test_phm_linear.py, test_compile.py and test_meta_device.py."""

import copy
import json
from pathlib import Path

import pytest
import torch
from conftest import (
    PLUGIN,
    TINY_FLAGS,
    TRAINING,
    build_as_fairseq_train,
    fairseq_generate,
    hypotheses,
    losses,
    run_main,
    slow,
    trained_once,
)
from fairseq import options
from torch import nn

from phm_fairseq.modules import LinearSpec, PHMLinear, count_parameters

TRANSLATION_DICTS = Path(__file__).resolve().parent / "fixtures" / "checkpoints" / "data" / "translation"


def xavier_variance(d, k, gain=1.0):
    return 2.0 * gain**2 / (d + k)


def moved_from_init(layer):
    """U and the term gains away from where they start, so that every term shows in H."""
    with torch.no_grad():
        if layer.U is not None:
            layer.U.normal_(0.0, 0.1)
        if layer.term_gain is not None:
            layer.term_gain.uniform_(0.5, 1.5)
    return layer


def rms(t):
    return t.square().mean().sqrt()


def reference_weight(layer):
    """H from the formula, term by term with torch.kron: sum_i g_i (A_i / rms A_i) kron (S_i / rms S_i) + U V^T,
    the normalisation and gains only with factor_norm."""
    A = layer.A.detach().double()
    if layer.S is not None:
        S = [layer.S[i].detach().double() for i in range(layer.n)]
    else:
        left, right = layer.S_left.detach().double(), layer.S_right.detach().double()
        if layer.factor_norm:
            S = [(left[i] / rms(left[i])) @ (right[i] / rms(right[i])) for i in range(layer.n)]
        else:
            S = [left[i] @ right[i] for i in range(layer.n)]
    terms = []
    for i in range(layer.n):
        if layer.factor_norm:
            gain = layer.term_scale * layer.term_gain[i].detach().double()
            S_i = S[i] / rms(S[i]) if layer.S is not None else S[i]
            terms.append(gain * torch.kron(A[i] / rms(A[i]), S_i))
        else:
            terms.append(torch.kron(A[i], S[i]))
    weight = sum(terms)
    if layer.U is not None:
        weight = weight + layer.U.detach().double() @ layer.V.detach().double().T
    return weight


OPTIONS = {
    "lowrank": dict(lowrank=3),
    "factor-norm": dict(factor_norm=True),
    "factor-norm, rank 2": dict(factor_norm=True, rank=2),
    "factor-norm, algebra-frozen": dict(factor_norm=True, rule="algebra-frozen"),
    "lowrank, factor-norm": dict(lowrank=2, factor_norm=True),
}


# --- the layer against its formula ---------------------------------------------------------------------


@pytest.mark.parametrize("options", list(OPTIONS))
@pytest.mark.parametrize("path", ["factored", "weight"])
def test_forward_is_the_formula(options, path):
    layer = moved_from_init(PHMLinear(16, 24, n=4, **OPTIONS[options])).double()
    layer.factored_max_rows = 10**9 if path == "factored" else 0
    x = torch.randn(5, 16, dtype=torch.float64)
    expected = x @ reference_weight(layer).T + layer.bias.detach()
    close = dict(rtol=1e-9, atol=1e-12)  # float64, up to factor_rms's epsilon (1e-12 added to mean squares)
    with torch.no_grad():
        torch.testing.assert_close(layer(x), expected, **close)
        torch.testing.assert_close(layer.weight, reference_weight(layer), **close)


@pytest.mark.parametrize("options", list(OPTIONS))
def test_the_options_start_at_the_plain_layer_drawn_from_the_same_seed(options):
    kwargs = OPTIONS[options]
    torch.manual_seed(3)
    plain = PHMLinear(256, 128, n=4, rule=kwargs.get("rule", "learned"), rank=kwargs.get("rank"))
    torch.manual_seed(3)
    layer = PHMLinear(256, 128, n=4, **kwargs)
    assert torch.equal(layer.A, plain.A) and torch.equal(layer.bias, plain.bias)  # drawn first, as before
    torch.testing.assert_close(layer.weight, plain.weight, rtol=1e-6, atol=1e-7)  # U = 0, gains = the factors' scales
    if layer.term_gain is not None:
        torch.testing.assert_close(layer.term_gain, torch.ones(4), rtol=0.5, atol=0)  # near 1: Adam steps it by lr


@pytest.mark.parametrize("n,rule", [(2, "learned"), (4, "learned"), (4, "algebra-init"), (8, "algebra-frozen")])
@pytest.mark.parametrize("options", ["lowrank", "factor-norm", "lowrank, factor-norm"])
def test_init_keeps_the_xavier_variance(n, rule, options):
    layer = PHMLinear(256, 512, n=n, rule=rule, gain=2**-0.5, **OPTIONS[options])
    ratio = layer.weight.var().item() / xavier_variance(256, 512, 2**-0.5)
    assert 0.8 < ratio < 1.2, f"Var(H) is {ratio:.2f}x the xavier target"
    if layer.V is not None:  # V at the layer's xavier variance, U zero: U gets a gradient from the first step
        assert 0.8 < layer.V.var().item() / xavier_variance(256, 512, 2**-0.5) < 1.2
        layer(torch.randn(4, 256)).square().sum().backward()
        assert layer.U.grad.abs().sum() > 0 and layer.V.grad.abs().sum() == 0


def test_factor_norm_takes_each_factors_scale_out_of_h():
    layer = moved_from_init(PHMLinear(16, 24, n=4, factor_norm=True))
    before = layer.weight.detach().clone()
    with torch.no_grad():
        layer.S[1].mul_(7.0)
        layer.A[2].mul_(0.1)
    torch.testing.assert_close(layer.weight, before)  # only the gains set each term's scale
    with torch.no_grad():
        layer.term_gain.mul_(2.0)
    torch.testing.assert_close(layer.weight, 2 * before)


@pytest.mark.parametrize(
    "kwargs,extra",
    [
        (dict(lowrank=8), lambda d, k, n: 8 * (d + k)),
        (dict(factor_norm=True), lambda d, k, n: n),
        (dict(lowrank=4, factor_norm=True, rank=2), lambda d, k, n: 4 * (d + k) + n - (k * d // n - 2 * (k + d))),
    ],
)
def test_parameter_counts(kwargs, extra):
    d, k, n = 128, 512, 4
    layer = PHMLinear(d, k, n=n, **kwargs)
    plain = k * d // n + n**3 + k
    assert sum(p.numel() for p in layer.parameters()) == plain + extra(d, k, n)
    counts = count_parameters(nn.Sequential(layer))
    assert counts.dense_total == d * k + k  # against the nn.Linear it stands for


def test_the_defaults_build_the_old_layer_and_spec():
    assert LinearSpec("phm", n=4, lowrank=0) == LinearSpec("phm", n=4) == LinearSpec("phm", n=4, lowrank=None)
    for layer in (PHMLinear(8, 8, n=2), PHMLinear(8, 8, n=2, lowrank=0)):
        assert list(layer.state_dict()) == ["S", "A", "bias"]
        assert layer.U is None and layer.V is None and layer.term_gain is None
    with_options = PHMLinear(8, 8, n=2, lowrank=2, factor_norm=True)
    assert list(with_options.state_dict()) == ["S", "A", "bias", "U", "V", "term_gain"]


@pytest.mark.parametrize(
    "kwargs,message",
    [
        (dict(lowrank=-1), r"PHM lowrank must be a non-negative integer .* got lowrank=-1"),
        (dict(lowrank=2.0), r"got lowrank=2.0"),
        (dict(lowrank=9), r"PHM layer 8->16: lowrank=9 exceeds min\(in_features, out_features\) = 8"),
    ],
)
def test_the_layer_refuses_a_rank_it_cannot_have(kwargs, message):
    with pytest.raises(ValueError, match=message):
        PHMLinear(8, 16, n=2, **kwargs)
    with pytest.raises(ValueError, match=message):
        LinearSpec("phm", n=2, **kwargs).build(8, 16)


def test_the_options_are_phm_options():
    for kwargs in (dict(lowrank=2), dict(factor_norm=True)):
        for kind in ("dense", "quaternion"):
            with pytest.raises(ValueError, match=r"as are lowrank and factor_norm, not of"):
                LinearSpec(kind, **kwargs)
    with pytest.raises(ValueError, match=r"factor_norm must be True or False"):
        LinearSpec("phm", n=2, factor_norm="yes")


# --- merging, export to a dense weight, compression ----------------------------------------------------


@pytest.mark.parametrize("options", list(OPTIONS))
def test_merged_and_dense_weights_are_the_formula(options):
    layer = moved_from_init(PHMLinear(16, 24, n=4, **OPTIONS[options])).eval()
    x = torch.randn(3, 16)
    expected = reference_weight(layer).float()
    with torch.no_grad():
        torch.testing.assert_close(layer.merge().current_weight(), expected)
        torch.testing.assert_close(layer.to_dense().weight, expected)
        torch.testing.assert_close(torch.jit.script(layer.unmerge())(x), layer(x))
        for tensor in (layer.U, layer.V, layer.term_gain):  # unmerged, eval mode: a write shows at once
            if tensor is not None:
                tensor.mul_(1.5)
                torch.testing.assert_close(layer(x), x @ reference_weight(layer).float().T + layer.bias)
        layer.merge().load_state_dict(moved_from_init(copy.deepcopy(layer)).state_dict())  # merges what it loads
        torch.testing.assert_close(layer.current_weight(), reference_weight(layer).float())


FLAGS = {
    "lowrank": ["--arch", "phm_transformer_demo", "--phm-n", "4", "--qkv-projection", "separate", "--phm-lowrank", "4"],
    "factor-norm": ["--arch", "phm_transformer_demo", "--phm-n", "4", "--phm-factor-norm"],
    "dense-attention": ["--arch", "phm_transformer_demo", "--phm-n", "4", "--dense-attention"],
    "all three": [
        *("--arch", "phm_transformer_demo", "--phm-n", "2", "--qkv-projection", "separate"),
        *("--phm-lowrank", "2", "--phm-factor-norm", "--dense-attention"),
    ],
}


def build(data, *flags):
    """(model, task, args) of the tiny Transformer that fairseq-train builds with ``flags``, U and the gains
    moved from their start."""
    model, task = build_as_fairseq_train(data, "--task", "translation", *flags)
    for layer in model.modules():
        if isinstance(layer, PHMLinear):
            moved_from_init(layer)
    argv = [str(data), *TRAINING, *TINY_FLAGS, "--task", "translation", *flags]
    return model.eval(), task, options.parse_args_and_arch(options.get_training_parser(), input_args=argv)


def test_placement_keeps_attention_dense_and_ties_the_ffn_rules(copy_task):
    model, _task, _args = build(copy_task, *FLAGS["all three"], "--phm-shared-rule", "model")
    for name, module in model.named_modules():
        if name.endswith(("q_proj", "k_proj", "v_proj", "out_proj")):
            assert type(module) is nn.Linear, name
    ffn = [module for name, module in model.named_modules() if name.endswith(("fc1", "fc2"))]
    assert ffn and all(isinstance(layer, PHMLinear) and layer.lowrank == 2 and layer.factor_norm for layer in ffn)
    assert all(layer.A is ffn[0].A for layer in ffn)  # --phm-shared-rule model: the FFN layers' one A


@pytest.mark.parametrize("name", list(FLAGS))
def test_the_export_is_fairseqs_transformer_and_computes_the_same(copy_task, name):
    from fairseq.models.transformer import TransformerModel

    from phm_fairseq.models.export import densify, stock_transformer_args

    model, task, args = build(copy_task, *FLAGS[name])
    stock = TransformerModel.build_model(stock_transformer_args(args), task).eval()
    stock.load_state_dict(densify(copy.deepcopy(model)).state_dict(), strict=True)
    task.load_dataset("test")
    batch = task.dataset("test").collater([task.dataset("test")[i] for i in range(8)])["net_input"]
    with torch.no_grad():
        torch.testing.assert_close(stock(**batch)[0], model(**batch)[0], rtol=1e-5, atol=1e-5)


def test_compression_fits_the_new_layers_and_the_low_rank_term_brings_it_nearer(copy_task):
    from phm_fairseq.models.compress import compress_into, total_relative_error

    dense, _, _ = build(copy_task, "--arch", "transformer_twin_demo")
    with torch.no_grad():  # a trained-like dense model: weights that are no Kronecker sums
        for p in dense.parameters():
            p.add_(0.05 * torch.randn_like(p))
    errors = {}
    for name, flags in {
        "plain fused": ["--arch", "phm_transformer_demo", "--phm-n", "4"],
        "plain separate": ["--arch", "phm_transformer_demo", "--phm-n", "4", "--qkv-projection", "separate"],
        **{name: FLAGS[name] for name in ("lowrank", "factor-norm", "all three")},
    }.items():
        target, _, _ = build(copy_task, *flags)
        report = compress_into(dense, target)
        for row in report:
            layer = target.get_submodule(row.name)
            weight = dense.get_submodule(row.name).weight if "qkv" not in row.name else None
            if weight is not None:
                error = (weight - layer.weight).norm() / weight.norm()
                assert abs(error.item() - row.relative_error) < 1e-5, row  # the report is the layer as set
        errors[name] = total_relative_error(report)
    assert errors["lowrank"] < errors["plain separate"]  # U V^T takes up part of what the Kronecker sum leaves
    assert abs(errors["factor-norm"] - errors["plain fused"]) < 1e-5  # the gains give the fitted sum exactly


# --- the flags: plain fairseq-train's, checked where the model is built ----------------------------------


def phm_params(*flags):
    from phm_fairseq.cli import params

    argv = [TRANSLATION_DICTS, "--task", "translation", "--source-lang", "src", "--target-lang", "tgt"]
    out = run_main(params.main, *argv, "--user-dir", PLUGIN, "--share-all-embeddings", "--json", *flags)
    return json.loads(out.stdout.strip().splitlines()[-1])["without_embeddings"]


def test_parameter_counts_at_the_demo_size():
    """docs/training.md's table: PHM n=4 with Q, K, V separate, against the dense model of its size."""
    phm = ["--arch", "phm_transformer_demo", "--phm-n", "4", "--qkv-projection", "separate"]
    dense = ["--arch", "transformer_twin_demo", *("--encoder-embed-dim", "64", "--decoder-embed-dim", "64")]
    dense += ["--encoder-ffn-embed-dim", "267", "--decoder-ffn-embed-dim", "267"]
    assert phm_params(*dense) == 239_148
    assert phm_params(*phm) == 239_616
    for rank in (4, 8, 16):  # each map adds rank * (in + out): 11,264 weights per unit of rank
        assert phm_params(*phm, "--phm-lowrank", str(rank)) == 239_616 + 11_264 * rank
    assert phm_params(*phm, "--phm-factor-norm") == 239_616 + 32 * 4  # 32 PHM maps, n gains each
    assert phm_params(*phm, "--dense-attention") == 532_992


@pytest.mark.parametrize(
    "flags,message",
    [
        (["--arch", "transformer_twin_demo", "--phm-lowrank", "4"], r"^--phm-lowrank 4: --phm-lowrank is an option"),
        (["--arch", "transformer_twin_demo", "--phm-factor-norm"], r"^--phm-factor-norm: --phm-factor-norm is an"),
        (
            ["--arch", "quaternion_transformer_demo", "--phm-factor-norm"],
            r"--phm-factor-norm is an option of PHM models, and this model is quaternion",
        ),
        (
            ["--arch", "phm_transformer_demo", "--phm-n", "4", "--phm-lowrank", "33"],
            r"--phm-lowrank 33 exceeds --encoder-embed-dim 32: .* can be at most 32",
        ),
        (["--arch", "phm_transformer_demo", "--phm-n", "4", "--phm-lowrank", "-2"], r"--phm-lowrank -2: PHM lowrank"),
        (
            ["--arch", "transformer_twin_demo", "--dense-attention"],
            r"--dense-attention keeps the attention of a PHM or quaternion model dense, and this model is dense",
        ),
        (
            ["--arch", "phm_transformer_demo", "--dense-attention", "--dense-ffn"],
            r"--dense-attention with --dense-ffn: every map would be dense",
        ),
        (
            ["--arch", "phm_transformer_demo", "--dense-attention", "--qkv-projection", "separate"]
            + ["--phm-shared-rule", "qkv"],
            r"--phm-shared-rule qkv concerns hypercomplex Q, K and V maps",
        ),
        (
            ["--arch", "quaternion_transformer_demo", "--dense-attention", "--quaternion-attention"],
            r"--quaternion-attention concerns hypercomplex Q, K and V maps",
        ),
    ],
)
def test_flags_that_cannot_apply_are_refused_by_name(copy_task, flags, message):
    with pytest.raises(ValueError, match=message):
        build_as_fairseq_train(copy_task, "--task", "translation", *flags)


def test_a_lowrank_of_zero_is_the_plain_model(copy_task):
    torch.manual_seed(1)
    plain, _ = build_as_fairseq_train(copy_task, "--task", "translation", "--arch", "phm_transformer_demo")
    torch.manual_seed(1)
    zero, _ = build_as_fairseq_train(
        copy_task, "--task", "translation", "--arch", "phm_transformer_demo", "--phm-lowrank", "0"
    )
    assert plain.state_dict().keys() == zero.state_dict().keys()
    assert all(torch.equal(value, zero.state_dict()[key]) for key, value in plain.state_dict().items())


# --- a short training: the new layers learn the copy task ---------------------------------------------

TRAINED = {
    "lowrank-factor-norm": [*FLAGS["lowrank"], "--phm-factor-norm"],
    "dense-attention": [*FLAGS["dense-attention"], "--qkv-projection", "separate"],
}


@pytest.fixture(scope="module", params=list(TRAINED))
@slow
def trained(request, copy_task, run_tmp_path):
    folder = run_tmp_path / "new_parameterisations" / request.param
    save_dir, log = trained_once(folder, copy_task, "--max-update", "300", *TRAINED[request.param])
    return request.param, save_dir / "checkpoint_best.pt", log


def test_the_new_layers_learn_to_copy(trained, copy_task):
    name, checkpoint, log = trained
    curve = losses(log)
    assert curve[-1] < 0.5 * curve[0], f"{name}: training loss {curve}"
    out = fairseq_generate(copy_task, checkpoint, "--batch-size", "32")
    sources = (copy_task.parent / "test.src").read_text().splitlines()
    hyps = hypotheses(out.stdout)
    exact = sum(hyps.get(i) == sources[i] for i in range(len(sources))) / len(sources)
    assert exact >= 0.8, f"{name}: only {exact:.0%} of the copies are exact"
