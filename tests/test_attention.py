"""Hypercomplex layers inside fairseq's MultiheadAttention."""

import math

import pytest
import torch

from phm_fairseq.models.attention import HypercomplexMultiheadAttention
from phm_fairseq.modules import LinearSpec, PHMLinear, count_parameters

SPECS = [LinearSpec("phm", n=4), LinearSpec("quaternion"), LinearSpec("phm", n=2, rule="algebra-init")]


def attention(spec, fused_qkv, dim=32, heads=4, **kwargs):
    torch.manual_seed(0)
    return HypercomplexMultiheadAttention(dim, heads, linear=spec, fused_qkv=fused_qkv, self_attention=True, **kwargs)


def manual_attention(mha, x):
    """Scaled dot-product attention written out from the projections' weights."""
    T, B, D = x.shape
    h, hd = mha.num_heads, mha.head_dim
    q, k, v = (torch.nn.functional.linear(x, p.weight, p.bias) for p in (mha.q_proj, mha.k_proj, mha.v_proj))
    split = lambda t: t.reshape(T, B * h, hd).transpose(0, 1)  # noqa: E731
    weights = torch.softmax(split(q) @ split(k).transpose(1, 2) / math.sqrt(hd), dim=-1)
    out = (weights @ split(v)).transpose(0, 1).reshape(T, B, D)
    return mha.out_proj(out)


@pytest.mark.parametrize("spec", SPECS, ids=str)
@pytest.mark.parametrize("fused_qkv", [False, True])
def test_pytorch_kernel_path_and_incremental_path_agree_with_the_definition(spec, fused_qkv):
    mha = attention(spec, fused_qkv)
    x = torch.randn(5, 3, 32)
    expected = manual_attention(mha, x)
    kernel_out, _ = mha(x, x, x)  # F.multi_head_attention_forward with q_proj.weight etc.
    torch.testing.assert_close(kernel_out, expected, rtol=1e-5, atol=1e-5)
    # fairseq's own path (used for incremental decoding), step by step with a causal view
    state = {}
    steps = [mha(x[t : t + 1], x[t : t + 1], x[t : t + 1], incremental_state=state)[0] for t in range(5)]
    causal = torch.triu(torch.full((5, 5), float("-inf")), 1)
    full, _ = mha(x, x, x, attn_mask=causal)
    torch.testing.assert_close(torch.cat(steps), full, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("fused_qkv", [False, True])
def test_gradients_reach_every_hypercomplex_parameter(fused_qkv):
    mha = attention(LinearSpec("phm", n=4), fused_qkv)
    x = torch.randn(5, 3, 32)
    mha(x, x, x)[0].pow(2).sum().backward()
    for name, p in mha.named_parameters():
        assert p.grad is not None and p.grad.abs().sum() > 0, name


def test_fused_qkv_is_one_layer_of_three_times_the_width():
    mha = attention(LinearSpec("phm", n=4), fused_qkv=True)
    assert isinstance(mha.qkv_proj, PHMLinear) and mha.qkv_proj.out_features == 96
    assert {name.split(".")[0] for name in mha.state_dict()} == {"qkv_proj", "out_proj"}
    torch.testing.assert_close(mha.k_proj.weight, mha.qkv_proj.weight[32:64])
    with pytest.raises(ValueError, match="fused_qkv needs self-attention"):
        HypercomplexMultiheadAttention(
            32, 4, linear=LinearSpec("phm", n=4), fused_qkv=True, encoder_decoder_attention=True
        )


def test_initialisation_follows_fairseqs_gains_and_survives_reset_parameters():
    mha = attention(LinearSpec("phm", n=4), fused_qkv=False, dim=256)
    xavier = lambda gain: 2 * gain**2 / (256 + 256)  # noqa: E731
    for _ in range(2):  # as built, then after fairseq's reset_parameters
        for proj, gain in ((mha.q_proj, 2**-0.5), (mha.k_proj, 2**-0.5), (mha.v_proj, 2**-0.5), (mha.out_proj, 1.0)):
            assert 0.8 < proj.weight.var().item() / xavier(gain) < 1.2
        assert torch.equal(mha.out_proj.bias, torch.zeros(256))
        before = mha.q_proj.S.clone()
        mha.reset_parameters()
        assert not torch.equal(mha.q_proj.S, before)  # really re-initialised, not a lost write


@pytest.mark.parametrize("spec", [LinearSpec("dense"), LinearSpec("phm", n=4)], ids=str)
def test_a_fused_layer_per_projection_starts_each_third_at_the_variance_of_a_projection_of_its_own(spec):
    """xavier over the whole 256 -> 768 map gives Q, K and V half the variance fairseq gives each
    256 -> 256 projection; "per-projection" gives each third exactly that of the separate layers."""
    dim, fairseq_qkv = 256, 2 * 0.5 / (256 + 256)  # 2 gain^2 / (fan_in + fan_out), gain 1/sqrt(2)
    separate = attention(spec, fused_qkv=False, dim=dim)
    for own in (separate.q_proj, separate.k_proj, separate.v_proj):
        assert 0.9 < own.weight.var().item() / fairseq_qkv < 1.1
    for init, expected in (("one-map", fairseq_qkv / 2), ("per-projection", fairseq_qkv)):
        fused = attention(spec, fused_qkv=True, fused_qkv_init=init, dim=dim)
        for third in (fused.q_proj, fused.k_proj, fused.v_proj):
            assert 0.9 < third.weight.var().item() / expected < 1.1
        before = fused.qkv_proj.weight.var().item()
        fused.reset_parameters()  # fairseq's hook keeps the gain the layer was built with
        assert 0.95 < fused.qkv_proj.weight.var().item() / before < 1.05
    with pytest.raises(ValueError, match=r"unknown fused_qkv_init 'per-head': choose one of one-map, per-projection"):
        attention(spec, fused_qkv=True, fused_qkv_init="per-head")


def test_separate_maps_sharing_one_rule_are_the_fused_map_with_its_blocks_aligned_to_q_k_v():
    """--phm-shared-rule qkv: the fused d -> 3d map's parameters (one A; S_i's rows split in three), each
    Kronecker block inside one of Q, K, V: the same outputs as the fused map up to a fixed permutation."""
    d, n = 32, 4
    spec = LinearSpec("phm", n=n, shared_rule="qkv")
    fused = attention(LinearSpec("phm", n=n), fused_qkv=True, dim=d).double()
    aligned = spec.finish_model(attention(spec, fused_qkv=False, dim=d)).double()
    maps = (aligned.q_proj, aligned.k_proj, aligned.v_proj)
    assert maps[1].A is maps[0].A and maps[2].A is maps[0].A
    assert count_parameters(aligned).total == count_parameters(fused).total
    block = d // n  # rows of one S_i per projection; the fused S_i has 3 * block
    with torch.no_grad():
        maps[0].A.copy_(fused.qkv_proj.A)
        for third, layer in enumerate(maps):
            layer.S.copy_(fused.qkv_proj.S[:, third * block : (third + 1) * block])
            layer.bias.copy_(fused.qkv_proj.bias.view(n, 3, block)[:, third].reshape(-1))
    # row p * block + r of projection `third` is the fused map's row p * 3 * block + third * block + r
    rows = torch.arange(3 * d).view(n, 3, block).transpose(0, 1).reshape(-1)
    x = torch.randn(5, d, dtype=torch.float64)
    torch.testing.assert_close(torch.cat([layer(x) for layer in maps], -1), fused.qkv_proj(x)[:, rows])
    with pytest.raises(
        ValueError, match=r"shared_rule='qkv' .* no self-attention that projects them by three PHM maps"
    ):
        spec.finish_model(attention(spec, fused_qkv=True, dim=d))


def count_calls(monkeypatch, obj, name):
    calls = []
    original = getattr(obj, name)
    monkeypatch.setattr(obj, name, lambda *args, **kwargs: calls.append(1) or original(*args, **kwargs))
    return calls


def test_fused_qkv_builds_h_once_per_training_forward(monkeypatch):
    mha = attention(LinearSpec("phm", n=4), fused_qkv=True).train()
    builds = count_calls(monkeypatch, mha.qkv_proj, "build_weight")
    x = torch.randn(5, 3, 32)
    for forwards in (1, 2):
        mha(x, x, x)[0].sum().backward()
        assert len(builds) == forwards  # not one per Q, K and V


@pytest.mark.parametrize("spec", SPECS, ids=str)
def test_fused_qkv_computes_its_output_once_per_decoding_step(monkeypatch, spec):
    mha = attention(spec, fused_qkv=True).eval()
    products = count_calls(monkeypatch, mha.qkv_proj, "forward")
    x, state = torch.randn(4, 5, 32), {}
    with torch.no_grad():
        for t in range(4):
            mha(x[t : t + 1], x[t : t + 1], x[t : t + 1], incremental_state=state)
            assert len(products) == t + 1


def test_quaternion_attention_refuses_a_fused_qkv_projection():
    from phm_fairseq.models.quaternion_attention import QuaternionMultiheadAttention

    with pytest.raises(ValueError, match="needs Q, K and V that are each a Hamilton product"):
        QuaternionMultiheadAttention(32, 2, linear=LinearSpec("quaternion"), fused_qkv=True, self_attention=True)


@pytest.mark.parametrize("spec", SPECS, ids=str)
@pytest.mark.parametrize("fused_qkv", [False, True])
def test_functional_call_in_eval_mode_uses_the_tensors_it_is_given(spec, fused_qkv):
    # torch.func, model soups and EMA tools call the module with other tensors in place of its own
    mha = attention(spec, fused_qkv).eval()
    x = torch.randn(5, 3, 32)
    zeros = {name: torch.zeros_like(t) for name, t in mha.named_parameters()}
    with torch.no_grad():
        own, _ = mha(x, x, x)  # the layer's own tensors first
        out, _ = torch.func.functional_call(mha, zeros, (x, x, x))
        assert torch.equal(out, torch.zeros_like(out))  # zero output projection, zero bias
        torch.testing.assert_close(mha(x, x, x)[0], own)
        torch.testing.assert_close(own, manual_attention(mha, x), rtol=1e-5, atol=1e-5)


def test_densify_of_a_bare_layer_returns_its_nn_linear():
    from phm_fairseq.models.export import densify

    for layer in (PHMLinear(8, 12, n=4), LinearSpec("quaternion").build(8, 12, bias=False)):
        dense = densify(layer)
        assert type(dense) is torch.nn.Linear
        x = torch.randn(3, 8)
        torch.testing.assert_close(dense(x), layer(x))
    dense = torch.nn.Linear(4, 4)
    assert densify(dense) is dense
