"""PHMLinear and QuaternionLinear against their definitions, and against each other."""

import copy
import itertools

import pytest
import torch
from torch import nn

from phm_fairseq.modules import (
    LinearSpec,
    PHMLinear,
    QuaternionLinear,
    kronecker_sum,
    multiplication_rule,
    structure_constants,
)


@pytest.fixture(autouse=True)
def seed():
    torch.manual_seed(0)


def literal_kronecker_sum(A, S):
    return sum(torch.kron(A[i], S[i]) for i in range(A.shape[0]))


@pytest.mark.parametrize("n,k,d", [(1, 3, 5), (2, 4, 6), (4, 8, 12), (8, 16, 8), (16, 32, 48)])
def test_one_contraction_equals_literal_sum_of_kronecker_products(n, k, d):
    A, S = torch.randn(n, n, n, dtype=torch.float64), torch.randn(n, k // n, d // n, dtype=torch.float64)
    torch.testing.assert_close(kronecker_sum(A, S), literal_kronecker_sum(A, S), rtol=0, atol=1e-12)


def test_layer_weight_is_the_kronecker_sum_of_its_parameters():
    layer = PHMLinear(12, 8, n=4)
    torch.testing.assert_close(layer.weight, literal_kronecker_sum(layer.A, layer.S))


def test_n1_equals_nn_linear_with_the_same_weight():
    dense = nn.Linear(6, 5)
    phm = PHMLinear(6, 5, n=1)
    with torch.no_grad():
        phm.A.fill_(1.0)
        phm.S.copy_(dense.weight[None])
        phm.bias.copy_(dense.bias)
    x = torch.randn(3, 7, 6)
    torch.testing.assert_close(phm(x), dense(x), rtol=0, atol=0)


def hamilton_product_eq_2_2(W, x):
    """W (x) x written out per eq. 2.2 of Zhang et al.; components are matrices and vectors."""
    Qr, Qx, Qy, Qz = W
    Pr, Px, Py, Pz = x.chunk(4, dim=-1)
    mm = lambda Q, P: P @ Q.T  # noqa: E731  (batched row vectors, nn.Linear layout)
    return torch.cat(
        [
            mm(Qr, Pr) - mm(Qx, Px) - mm(Qy, Py) - mm(Qz, Pz),
            mm(Qx, Pr) + mm(Qr, Px) - mm(Qz, Py) + mm(Qy, Pz),
            mm(Qy, Pr) + mm(Qz, Px) + mm(Qr, Py) - mm(Qx, Pz),
            mm(Qz, Pr) - mm(Qy, Px) + mm(Qx, Py) + mm(Qr, Pz),
        ],
        dim=-1,
    )


@pytest.mark.parametrize("make", [
    lambda: PHMLinear(16, 24, n=4, bias=False, rule="algebra-frozen"),
    lambda: QuaternionLinear(16, 24, bias=False),
])
def test_frozen_hamilton_rule_is_the_hamilton_product(make):
    layer = make()
    x = torch.randn(5, 16)
    torch.testing.assert_close(layer(x), hamilton_product_eq_2_2(layer.S, x), rtol=0, atol=1e-6)


def test_hamilton_rule_is_quaternion_multiplication():
    # i j = k, j k = i, k i = j, i^2 = j^2 = k^2 = -1 (basis 1, i, j, k = 0..3)
    C = structure_constants(4)
    assert C[1, 2, 3] == C[2, 3, 1] == C[3, 1, 2] == 1
    assert C[2, 1, 3] == C[3, 2, 1] == C[1, 3, 2] == -1
    assert all(C[a, a, 0] == -1 for a in (1, 2, 3))


@pytest.mark.parametrize("n", [2, 4, 8, 16])
def test_algebra_rules_are_norm_preserving_for_composition_algebras(n):
    # |x y| = |x| |y| holds for complex numbers, quaternions and octonions, not sedenions
    C = structure_constants(n)
    x, y = torch.randn(2, 100, n, dtype=torch.float64)
    xy = torch.einsum("ba,bc,acd->bd", x, y, C)
    ratio = xy.norm(dim=-1) / (x.norm(dim=-1) * y.norm(dim=-1))
    assert torch.allclose(ratio, torch.ones(100, dtype=torch.float64)) == (n <= 8)


@pytest.mark.parametrize("n", [1, 2, 4, 8, 16])
def test_algebra_rule_has_one_signed_unit_per_block(n):
    A = multiplication_rule(n)
    assert torch.equal(A.abs().sum(0), torch.ones(n, n, dtype=A.dtype))


@pytest.mark.parametrize("n,k,d,bias", [(1, 8, 8, True), (2, 6, 4, True), (4, 64, 32, False), (8, 512, 256, True)])
def test_parameter_count_is_kd_over_n_plus_n_cubed(n, k, d, bias):
    layer = PHMLinear(d, k, n=n, bias=bias)
    assert sum(p.numel() for p in layer.parameters()) == k * d // n + n**3 + (k if bias else 0)


def test_frozen_rule_keeps_a_out_of_parameters_and_checkpoints():
    layer = QuaternionLinear(8, 12)
    assert sum(p.numel() for p in layer.parameters()) == 8 * 12 // 4 + 12
    assert set(layer.state_dict()) == {"S", "bias"}


@pytest.mark.parametrize("shape", [(7,), (2, 7), (3, 2, 7), (2, 3, 4, 7)])
def test_any_leading_dims(shape):
    layer = PHMLinear(7, 14, n=7)
    x = torch.randn(*shape)
    y = layer(x)
    assert y.shape == (*shape[:-1], 14)
    torch.testing.assert_close(y.reshape(-1, 14), layer(x.reshape(-1, 7)))


def test_gradcheck_float64():
    for rule in ("learned", "algebra-init"):
        layer = PHMLinear(8, 4, n=2, rule=rule).double()
        x = torch.randn(3, 8, dtype=torch.float64, requires_grad=True)
        inputs = (x, layer.A, layer.S, layer.bias)
        assert torch.autograd.gradcheck(
            lambda x, A, S, b: nn.functional.linear(x, kronecker_sum(A, S), b), inputs
        )
        layer(x).sum().backward()
        assert layer.A.grad is not None and layer.S.grad is not None


def test_frozen_rule_gets_no_gradient_in_a():
    layer = PHMLinear(8, 8, n=4, rule="algebra-frozen")
    layer(torch.randn(2, 8)).sum().backward()
    assert not layer.A.requires_grad and layer.S.grad is not None


@pytest.mark.parametrize("kwargs,message", [
    (dict(in_features=10, out_features=8, n=4), r"10->8: n=4 must divide both in_features=10 and out_features=8; n can be one of \[1, 2\]"),
    (dict(in_features=8, out_features=6, n=4), r"n=4 must divide .* out_features=6"),
    (dict(in_features=8, out_features=8, n=0), r"positive integer, got n=0"),
    (dict(in_features=8, out_features=8, n=2.0), r"positive integer, got n=2.0"),
    (dict(in_features=6, out_features=6, n=3, rule="algebra-init"), r"no Cayley-Dickson algebra of dimension n=3"),
    (dict(in_features=8, out_features=8, n=4, rule="hamilton"), r"unknown PHM rule 'hamilton'"),
])
def test_clear_errors(kwargs, message):
    with pytest.raises(ValueError, match=message):
        PHMLinear(**kwargs)


def test_spec_errors_and_builds():
    with pytest.raises(ValueError, match="unknown linear kind 'phn'"):
        LinearSpec("phn")
    with pytest.raises(ValueError, match="no Cayley-Dickson algebra of dimension n=5"):
        LinearSpec("phm", n=5, rule="algebra-frozen")
    assert type(LinearSpec().build(4, 8)) is nn.Linear
    assert type(LinearSpec("quaternion").build(4, 8)) is QuaternionLinear
    layer = LinearSpec("phm", n=2, rule="algebra-init").build(4, 8, bias=False, gain=0.5)
    assert (layer.n, layer.rule, layer.gain, layer.bias) == (2, "algebra-init", 0.5, None)


def test_to_dense_is_equivalent():
    layer = PHMLinear(12, 8, n=4)
    dense = layer.to_dense()
    assert type(dense) is nn.Linear
    x = torch.randn(4, 12)
    torch.testing.assert_close(dense(x), layer(x))


def test_extra_repr():
    text = repr(PHMLinear(512, 2048, n=4))
    assert "in_features=512, out_features=2048, n=4, rule=learned" in text
    assert "params=264,256 (0.252x dense)" in text
    assert "rule=algebra-frozen (quaternion)" in repr(QuaternionLinear(8, 8))


# --- the eval-mode cache ------------------------------------------------------------------

def cached(layer):
    """H as eval-mode inference sees it."""
    with torch.no_grad():
        return layer.weight


def evaluated(layer):
    return copy.deepcopy(layer).eval()


def test_cache_is_reused_in_eval_and_never_in_training():
    layer = PHMLinear(8, 8, n=2).eval()
    first = cached(layer)
    assert cached(layer) is first
    layer.train()
    assert layer._cached_weight is None
    with torch.no_grad():
        assert layer.weight is not layer.weight  # training builds H afresh every time
    layer.eval()
    assert layer.weight.requires_grad  # eval with grad enabled: differentiable, uncached


def test_cache_dropped_after_optimizer_step():
    layer = PHMLinear(8, 8, n=2)
    optimizer = torch.optim.SGD(layer.parameters(), lr=0.1)
    layer.eval()
    before = cached(layer)
    layer(torch.randn(3, 8)).sum().backward()
    optimizer.step()
    after = cached(layer)
    assert after is not before and not torch.equal(after, before)
    torch.testing.assert_close(after, layer.build_weight().detach())


def test_cache_dropped_after_load_state_dict():
    layer, other = PHMLinear(8, 8, n=2).eval(), PHMLinear(8, 8, n=2)
    before = cached(layer)
    layer.load_state_dict(other.state_dict())
    torch.testing.assert_close(cached(layer), other.build_weight().detach())
    assert not torch.equal(cached(layer), before)


def test_cache_dropped_after_in_place_edit_and_parameter_swap():
    layer = PHMLinear(8, 8, n=2).eval()
    before = cached(layer)
    with torch.no_grad():
        layer.S.mul_(2)
    torch.testing.assert_close(cached(layer), 2 * before)
    layer.S = nn.Parameter(torch.zeros_like(layer.S))
    assert torch.equal(cached(layer), torch.zeros(8, 8))


def test_cache_follows_dtype_and_device_moves():
    layer = PHMLinear(8, 8, n=2).eval()
    before = cached(layer)
    layer.double()
    assert cached(layer).dtype == torch.float64
    torch.testing.assert_close(cached(layer).float(), before)
    layer.to(torch.float32)
    assert cached(layer).dtype == torch.float32
    x = torch.randn(2, 8)
    with torch.no_grad():
        torch.testing.assert_close(layer(x), nn.functional.linear(x, layer.build_weight(), layer.bias))


def test_cached_forward_equals_uncached():
    layer = PHMLinear(16, 32, n=4)
    x = torch.randn(5, 16)
    expected = layer(x).detach()
    layer.eval()
    with torch.inference_mode():
        torch.testing.assert_close(layer(x), expected)
        torch.testing.assert_close(layer(x), expected)


# --- initialisation -------------------------------------------------------------------------

def xavier_variance(d, k, gain=1.0):
    return 2.0 * gain**2 / (d + k)


@pytest.mark.parametrize("n,rule", itertools.product([2, 4, 8, 16], ["learned", "algebra-init", "algebra-frozen"]))
@pytest.mark.parametrize("d,k,gain", [(512, 2048, 1.0), (256, 256, 2**-0.5)])
def test_variance_of_h_matches_the_dense_xavier_target(n, rule, d, k, gain):
    layer = PHMLinear(d, k, n=n, rule=rule, gain=gain)
    ratio = layer.weight.var().item() / xavier_variance(d, k, gain)
    assert 0.8 < ratio < 1.2, f"Var(H) is {ratio:.2f}x the xavier target"


@pytest.mark.parametrize("d,k,gain", [(512, 2048, 1.0), (256, 256, 2**-0.5)])
def test_quaternion_init_matches_the_dense_xavier_target(d, k, gain):
    ratio = QuaternionLinear(d, k, gain=gain).weight.var().item() / xavier_variance(d, k, gain)
    assert 0.8 < ratio < 1.2, f"Var(H) is {ratio:.2f}x the xavier target"


def test_learned_init_gives_every_block_the_target_variance():
    layer = PHMLinear(512, 512, n=4)
    blocks = layer.weight.reshape(4, 128, 4, 128).permute(0, 2, 1, 3).reshape(16, -1)
    ratios = blocks.var(dim=1) / xavier_variance(512, 512)
    assert ((ratios > 0.9) & (ratios < 1.1)).all(), ratios


def test_init_is_seeded_from_torchs_rng():
    torch.manual_seed(1)
    a = QuaternionLinear(8, 8).state_dict()
    torch.manual_seed(1)
    b = QuaternionLinear(8, 8).state_dict()
    assert all(torch.equal(a[key], b[key]) for key in a)


# --- autocast -------------------------------------------------------------------------------

def test_bfloat16_autocast_runs_in_bfloat16_with_gradients():
    layer = PHMLinear(16, 32, n=4)
    x = torch.randn(4, 16)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        y = layer(x)
    assert y.dtype == torch.bfloat16
    y.float().sum().backward()
    assert layer.A.grad.dtype == torch.float32 and layer.S.grad is not None


# --- the factored product and the path choice -----------------------------------------------

LAYERS = {
    "phm-learned": lambda d, k, n, **kw: PHMLinear(d, k, n, **kw),
    "phm-algebra-init": lambda d, k, n, **kw: PHMLinear(d, k, n, rule="algebra-init", **kw),
    "phm-algebra-frozen": lambda d, k, n, **kw: PHMLinear(d, k, n, rule="algebra-frozen", **kw),
    "quaternion": lambda d, k, n, **kw: QuaternionLinear(d, k, **kw),
}


def with_path(layer, path):
    """A copy of ``layer`` that always takes one product: "factored" or "weight" (H)."""
    layer = copy.deepcopy(layer)
    layer.factored_max_rows = 10**9 if path == "factored" else 0
    return layer


def shapes_for(kind):
    ns = [4] if kind == "quaternion" else [1, 2, 4, 8]
    return [(n, d, k) for n in ns for d, k in [(16, 32), (32, 16), (8, 8)]]


@pytest.mark.parametrize("kind", list(LAYERS))
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("lead", [(), (1,), (3,), (2, 5)])
@pytest.mark.parametrize("bias", [True, False])
def test_factored_equals_cached_equals_the_definition(kind, dtype, lead, bias):
    for n, d, k in shapes_for(kind):
        layer = LAYERS[kind](d, k, n, bias=bias).to(dtype).eval()
        x = torch.randn(*lead, d, dtype=dtype)
        expected = nn.functional.linear(x, layer.build_weight().detach(), layer.bias)
        tolerance = {"atol": 1e-5, "rtol": 1e-5} if dtype == torch.float32 else {"atol": 1e-12, "rtol": 1e-12}
        with torch.no_grad():
            for path in ("factored", "weight"):
                out = with_path(layer, path)(x)
                assert out.shape == (*lead, k) and out.dtype == dtype
                torch.testing.assert_close(out, expected, **tolerance, msg=f"{kind} n={n} {d}->{k} {path}")


@pytest.mark.parametrize("kind", list(LAYERS))
def test_gradients_through_either_path_match(kind):
    for n, d, k in shapes_for(kind):
        layer = LAYERS[kind](d, k, n).double()
        x = torch.randn(3, d, dtype=torch.float64, requires_grad=True)
        grads = {}
        for path in ("factored", "weight"):
            copy_ = with_path(layer, path)
            copy_(x).square().sum().backward()
            grads[path] = [x.grad.clone()] + [p.grad for p in copy_.parameters()]
            x.grad = None
        for a, b in zip(grads["factored"], grads["weight"]):
            torch.testing.assert_close(a, b)


def test_gradcheck_of_the_factored_product():
    from phm_fairseq.modules.phm_linear import kronecker_sum_linear

    for d, k in [(4, 8), (8, 4)]:
        A = torch.randn(2, 2, 2, dtype=torch.float64, requires_grad=True)
        S = torch.randn(2, k // 2, d // 2, dtype=torch.float64, requires_grad=True)
        b = torch.randn(k, dtype=torch.float64, requires_grad=True)
        x = torch.randn(3, d, dtype=torch.float64, requires_grad=True)
        assert torch.autograd.gradcheck(kronecker_sum_linear, (x, A, S, b))


@pytest.mark.parametrize("kind", list(LAYERS))
def test_factored_product_under_bfloat16_autocast(kind):
    layer = LAYERS[kind](32, 64, 4).eval()
    x = torch.randn(5, 32)
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
        factored, cached = with_path(layer, "factored")(x), with_path(layer, "weight")(x)
        reference = nn.functional.linear(x, layer.build_weight(), layer.bias)
    assert factored.dtype == cached.dtype == reference.dtype == torch.bfloat16
    torch.testing.assert_close(factored.float(), reference.float(), atol=0.05, rtol=0.02)
    torch.testing.assert_close(cached.float(), reference.float(), atol=0.05, rtol=0.02)


def test_few_rows_take_the_factored_product_and_never_build_h(monkeypatch):
    layer = PHMLinear(64, 256, n=4).eval()
    layer.factored_max_rows = 5
    builds = []
    build = layer.build_weight
    monkeypatch.setattr(layer, "build_weight", lambda: builds.append(1) or build())
    with torch.no_grad():
        layer(torch.randn(5, 64))
        layer(torch.randn(1, 5, 64))
        assert builds == []  # decoding-sized inputs never build H
        layer(torch.randn(6, 64))
        layer(torch.randn(2, 3, 64))
        assert builds == [1]  # larger ones build it once and reuse it


def test_the_measured_crossover_is_the_default_and_can_be_overridden():
    from phm_fairseq.modules.phm_linear import factored_crossover

    layer = PHMLinear(512, 2048, n=8)
    assert layer.factored_rows_limit() == factored_crossover(512, 2048, 8)
    assert factored_crossover(512, 2048, 1) == 0  # n = 1 is a dense layer: nothing to gain
    layer.factored_max_rows = 0
    assert layer.factored_rows_limit() == 0


# --- the eval cache never serves a stale H, whatever wrote the parameters -----------------------

def _fused_adam_step(layer):
    optimizer = torch.optim.Adam(layer.parameters(), lr=0.5, fused=True)
    layer(torch.randn(3, 8)).sum().backward()
    optimizer.step()


def _fairseq_adam_step(layer):
    from fairseq.optim.adam import Adam  # writes its update through p.data

    optimizer = Adam(layer.parameters(), lr=0.5)
    layer(torch.randn(3, 8)).sum().backward()
    optimizer.step()


def _assign_data(layer):
    layer.S.data = torch.randn_like(layer.S)


def _edit_data_in_place(layer):
    layer.S.data.mul_(3)


def _vector_to_parameters(layer):
    vector = torch.nn.utils.parameters_to_vector(layer.parameters())
    torch.nn.utils.vector_to_parameters(torch.randn_like(vector), layer.parameters())


@pytest.mark.parametrize("write", [_fused_adam_step, _fairseq_adam_step, _assign_data, _edit_data_in_place,
                                   _vector_to_parameters])
def test_cache_is_never_stale_whatever_writes_the_parameters(write):
    if write is _fairseq_adam_step:
        pytest.importorskip("fairseq")
    # a custom loop or evaluation hook: the layer stays in eval mode throughout
    layer = with_path(PHMLinear(8, 8, n=2), "weight").eval()
    x = torch.randn(4, 8)
    with torch.no_grad():
        before = layer(x)  # builds and caches H
    write(layer)
    with torch.no_grad():
        after = layer(x)
        expected = nn.functional.linear(x, layer.build_weight(), layer.bias)
    assert not torch.allclose(expected, before)
    torch.testing.assert_close(after, expected)
