"""PHMLinear and QuaternionLinear against their definitions, and against each other."""

import copy
import itertools
import warnings

import pytest
import torch
from conftest import hamilton_product_eq_2_2
from torch import nn

from phm_fairseq.modules import (
    LinearSpec,
    PHMLinear,
    QuaternionLinear,
    count_parameters,
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


@pytest.mark.parametrize(
    "make",
    [
        lambda: PHMLinear(16, 24, n=4, bias=False, rule="algebra-frozen"),
        lambda: QuaternionLinear(16, 24, bias=False),
    ],
)
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


def test_frozen_rule_gets_no_gradient_in_a():
    layer = PHMLinear(8, 8, n=4, rule="algebra-frozen")
    layer(torch.randn(2, 8)).sum().backward()
    assert not layer.A.requires_grad and layer.S.grad is not None


@pytest.mark.parametrize(
    "kwargs,message",
    [
        (
            dict(in_features=10, out_features=8, n=4),
            r"10->8: n=4 must divide both in_features=10 and out_features=8; n can be one of \[1, 2\]",
        ),
        (dict(in_features=8, out_features=6, n=4), r"n=4 must divide .* out_features=6"),
        (dict(in_features=8, out_features=8, n=0), r"positive integer, got n=0"),
        (dict(in_features=8, out_features=8, n=2.0), r"positive integer, got n=2.0"),
        (dict(in_features=6, out_features=6, n=3, rule="algebra-init"), r"no Cayley-Dickson algebra of dimension n=3"),
        (dict(in_features=8, out_features=8, n=4, rule="hamilton"), r"unknown PHM rule 'hamilton'"),
    ],
)
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


# --- H in eval mode ----------------------------------------------------------------------


def inference_weight(layer):
    """The H that a forward computes with now (the merged one while merged)."""
    with torch.no_grad():
        return layer.current_weight()


def evaluated(layer):
    return copy.deepcopy(layer).eval()


def zeros_for(layer):
    return {name: torch.zeros_like(t) for name, t in layer.named_parameters()}


def definition(layer, x):
    """F.linear with H built now from whatever tensors the layer holds."""
    with torch.no_grad():
        return nn.functional.linear(x, layer.build_weight(), layer.bias)


def test_h_is_kept_only_while_merged_and_never_in_training():
    layer = PHMLinear(8, 8, n=2).eval()
    assert inference_weight(layer) is not inference_weight(layer)  # eval mode alone keeps no H: none can be stale
    first = inference_weight(layer.merge())
    assert inference_weight(layer) is first
    layer.train()  # unmerges
    with torch.no_grad():
        assert layer.weight is not layer.weight  # training builds H afresh every time
    layer.eval()
    assert layer.weight.requires_grad  # eval with grad enabled: differentiable
    again = inference_weight(layer.merge())  # built anew, equal
    assert again is not first and torch.equal(again, first)


def test_inference_weight_dropped_after_optimizer_step():
    layer = PHMLinear(8, 8, n=2)
    optimizer = torch.optim.SGD(layer.parameters(), lr=0.1)
    layer.eval()
    before = inference_weight(layer)
    layer(torch.randn(3, 8)).sum().backward()
    optimizer.step()
    after = inference_weight(layer)
    assert after is not before and not torch.equal(after, before)
    torch.testing.assert_close(after, layer.build_weight().detach())


def test_inference_weight_dropped_after_load_state_dict():
    layer, other = PHMLinear(8, 8, n=2).eval(), PHMLinear(8, 8, n=2)
    before = inference_weight(layer)
    layer.load_state_dict(other.state_dict())
    torch.testing.assert_close(inference_weight(layer), other.build_weight().detach())
    assert not torch.equal(inference_weight(layer), before)


def test_inference_weight_dropped_after_in_place_edit_and_parameter_swap():
    layer = PHMLinear(8, 8, n=2).eval()
    before = inference_weight(layer)
    with torch.no_grad():
        layer.S.mul_(2)
    torch.testing.assert_close(inference_weight(layer), 2 * before)
    layer.S = nn.Parameter(torch.zeros_like(layer.S))
    assert torch.equal(inference_weight(layer), torch.zeros(8, 8))


def test_inference_weight_follows_dtype_and_device_moves():
    layer = PHMLinear(8, 8, n=2).eval()
    before = inference_weight(layer)
    layer.double()
    assert inference_weight(layer).dtype == torch.float64
    torch.testing.assert_close(inference_weight(layer).float(), before)
    layer.to(torch.float32)
    assert inference_weight(layer).dtype == torch.float32
    x = torch.randn(2, 8)
    with torch.no_grad():
        torch.testing.assert_close(layer(x), nn.functional.linear(x, layer.build_weight(), layer.bias))


def test_eval_forward_equals_the_training_forward():
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


@pytest.mark.parametrize(
    "make",
    [lambda: PHMLinear(8, 8, n=2), lambda: quietly(PHMLinear, 8, 8, 2, rank=2), lambda: QuaternionLinear(8, 8)],
    ids=["phm", "phm-rank-2", "quaternion"],
)
def test_init_draws_from_torchs_global_generator(make):
    def state(seed):
        torch.manual_seed(seed)
        return make().state_dict()

    first, again, other = state(1), state(1), state(2)
    assert first.keys() == again.keys() == other.keys()
    assert all(torch.equal(first[key], again[key]) for key in first)  # the seed decides everything
    assert all(not torch.equal(first[key], other[key]) for key in first)  # every tensor drawn from it
    torch.manual_seed(1)
    make()
    assert any(not torch.equal(first[key], value) for key, value in make().state_dict().items())  # it advances


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


# (small layers save no weights at a low rank: the warning that says so is expected)
LOW_RANK_SAVES_NOTHING = pytest.mark.filterwarnings("ignore:PHM layer .* rank")


def quietly(make, *args, **kwargs):
    """A layer built without the warning that rank 2 saves no weights in these tiny layers."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return make(*args, **kwargs)


def trained_away_from_init(layer):
    """``layer`` with U and the term gains moved from where they start (U = 0 hides U V^T, gains that
    reproduce the unnormalised H hide the normalisation), so that every term shows in its outputs."""
    with torch.no_grad():
        if layer.U is not None:
            layer.U.normal_(0.0, 0.1)
        if layer.term_gain is not None:
            layer.term_gain.uniform_(0.5, 1.5)
    return layer


LAYERS = {
    "phm-learned": lambda d, k, n, **kw: PHMLinear(d, k, n, **kw),
    "phm-algebra-init": lambda d, k, n, **kw: PHMLinear(d, k, n, rule="algebra-init", **kw),
    "phm-algebra-frozen": lambda d, k, n, **kw: PHMLinear(d, k, n, rule="algebra-frozen", **kw),
    "phm-rank-2": lambda d, k, n, **kw: quietly(PHMLinear, d, k, n, rank=2, **kw),
    "quaternion": lambda d, k, n, **kw: QuaternionLinear(d, k, **kw),
    # issue 56's options (zero-size layers: no U V^T, whose rank is at most min(d, k))
    "phm-lowrank-3": lambda d, k, n, **kw: trained_away_from_init(PHMLinear(d, k, n, lowrank=min(3, d, k), **kw)),
    "phm-factor-norm": lambda d, k, n, **kw: trained_away_from_init(PHMLinear(d, k, n, factor_norm=True, **kw)),
    "phm-factor-norm-rank-2": lambda d, k, n, **kw: trained_away_from_init(
        quietly(PHMLinear, d, k, n, rank=2, factor_norm=True, **kw)
    ),
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
def test_factored_equals_h_equals_the_definition(kind, dtype, lead, bias):
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


@LOW_RANK_SAVES_NOTHING
@pytest.mark.parametrize("kind", list(LAYERS))
@pytest.mark.parametrize("path", ["factored", "weight"])
@pytest.mark.parametrize("mode", ["train", "eval"])
def test_gradcheck_of_the_layer_float64(kind, path, mode):
    for d, k in [(4, 8), (8, 4)]:
        layer = getattr(with_path(LAYERS[kind](d, k, 4 if kind == "quaternion" else 2).double(), path), mode)()
        params = list(layer.parameters())
        x = torch.randn(3, d, dtype=torch.float64, requires_grad=True)
        assert torch.autograd.gradcheck(lambda x, *params, layer=layer: layer(x), (x, *params))


@LOW_RANK_SAVES_NOTHING
@pytest.mark.parametrize("rank", [None, 2])
def test_gradcheck_through_layers_that_share_their_rule_float64(rank):
    model = TwoSides(LinearSpec("phm", n=4, rank=rank, shared_rule="model")).double()
    chain = nn.Sequential(model.encoder[1], model.decoder[0], model.decoder[1])  # 8 -> 8 -> 8 -> 16, one A
    params = list(chain.parameters())
    assert sum(p is model.encoder[0].A for p in params) == 1
    x = torch.randn(2, 8, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda x, *params: chain(x), (x, *params))


def test_gradcheck_of_the_factored_product():
    from phm_fairseq.modules.functional import kronecker_sum_linear

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
        factored, with_h = with_path(layer, "factored")(x), with_path(layer, "weight")(x)
        reference = nn.functional.linear(x, layer.build_weight(), layer.bias)
    assert factored.dtype == with_h.dtype == reference.dtype == torch.bfloat16
    torch.testing.assert_close(factored.float(), reference.float(), atol=0.05, rtol=0.02)
    torch.testing.assert_close(with_h.float(), reference.float(), atol=0.05, rtol=0.02)


@pytest.mark.parametrize("kind", list(LAYERS))
def test_a_halved_layer_computes_and_trains_in_float16_on_either_path(kind):
    """fairseq's --memory-efficient-fp16 (training) and generate --fp16 halve the whole model, on CPU too;
    an H built in float32 before leaves no trace."""
    layer = LAYERS[kind](32, 64, 4).eval()
    x = torch.randn(5, 32)
    with torch.no_grad():
        reference = nn.functional.linear(x.double(), layer.build_weight().double(), layer.bias.double())
        layer.factored_max_rows = 0
        layer(x)  # H built in float32
        layer.half()
        with_h = layer(x.half())
        layer.factored_max_rows = 10**9
        factored = layer(x.half())
    assert with_h.dtype == factored.dtype == torch.float16
    for out in (with_h, factored):
        torch.testing.assert_close(out.double(), reference, atol=0.01, rtol=0.01)
    layer.train()
    layer(x.half()).float().square().sum().backward()
    grads = [p.grad for p in layer.parameters() if p.requires_grad]
    assert grads and all(g.dtype == torch.float16 and torch.isfinite(g).all() for g in grads)


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
        assert builds == [1, 1]  # larger ones build it (merge() keeps one: test_h_is_kept_only_while_merged...)


def test_the_measured_crossover_rule_picks_the_product_and_can_be_overridden(monkeypatch):
    from phm_fairseq.modules.product_rule import factored_crossover, factored_rows_rule

    # docs/layers.md: 0 for n = 1, under 786,432 weights, and at n >= 16 under 1,048,576 weights;
    # else 8 rows per 1,048,576 weights
    expected = {(512, 1536, 4): 6, (512, 2048, 8): 8, (2048, 512, 4): 8, (1024, 4096, 8): 32, (512, 2048, 16): 8,
                (512, 2048, 1): 0, (512, 1024, 4): 0, (768, 1024, 16): 0, (768, 1024, 8): 6}  # fmt: skip
    assert {shape: factored_crossover(*shape) for shape in expected} == expected
    # from 2 rows: one row by H is a matrix-vector product, as fast or faster
    assert factored_rows_rule(512, 2048, 8) == range(2, 9) and factored_rows_rule(1024, 4096, 2) == range(2, 33)
    assert factored_rows_rule(512, 1024, 4) == range(2, 1)  # empty: always H
    layer = PHMLinear(512, 2048, n=8).eval()
    assert layer.factored_rows(torch.device("cpu")) == range(2, 9)  # one row: H
    assert layer.factored_rows(torch.device("meta")) == range(0)  # measured on CPU only: elsewhere always H
    builds = []
    build = layer.build_weight
    monkeypatch.setattr(layer, "build_weight", lambda: builds.append(1) or build())
    with torch.no_grad():
        layer(torch.randn(2, 4, 512))  # 8 rows: factored
        layer(torch.randn(2, 512))  # 2 rows: factored
        assert builds == []
        layer(torch.randn(9, 512))  # 9 rows: H
        assert len(builds) == 1
        layer(torch.randn(512))  # one row: H
        layer(torch.randn(1, 1, 512))
        assert len(builds) == 3
        layer.factored_max_rows = 1  # the override: factored for 1 row too, H from 2
        layer(torch.randn(1, 512))
        layer(torch.randn(2, 512))
        assert len(builds) == 4 and layer.factored_rows() == range(1, 2)
        layer.factored_max_rows = 0  # always H
        layer(torch.randn(1, 512))
        assert len(builds) == 5 and layer.factored_rows() == range(0)


# --- eval mode never computes with a stale H after a write a version counter sees ------------------


def _step(optimizer_class, **options):
    def step(layer):
        optimizer = optimizer_class(layer.parameters(), lr=0.5, **options)
        layer(torch.randn(3, 8)).sum().backward()
        optimizer.step()

    step.__name__ = f"{optimizer_class.__name__}({', '.join(f'{k}={v}' for k, v in options.items())})"
    return step


def _fairseq_adam_step(layer):
    from fairseq.optim.adam import Adam  # writes its update through p.data

    optimizer = Adam(layer.parameters(), lr=0.5)
    layer(torch.randn(3, 8)).sum().backward()
    optimizer.step()


def _in_place_edit_of_a_view(layer):
    with torch.no_grad():
        layer.S[0].mul_(3)


def _assign_data(layer):
    layer.S.data = torch.randn_like(layer.S)


def _assign_a_view_of_the_same_memory_to_data(layer):
    layer.S.data = layer.S.data.transpose(1, 2)  # same storage and address, another layout (square S_i)


def _assign_a_parameter(layer):
    layer.S = nn.Parameter(torch.randn_like(layer.S))


def _vector_to_parameters(layer):
    vector = torch.nn.utils.parameters_to_vector(layer.parameters())
    torch.nn.utils.vector_to_parameters(torch.randn_like(vector), layer.parameters())


def _load_state_dict_with_assign(layer):
    layer.load_state_dict(PHMLinear(8, 8, n=2).state_dict(), assign=True)


def _step_through_a_layer_that_shares_the_rule(layer):
    other = PHMLinear(8, 8, n=2)
    other.A = layer.A  # as LinearSpec.finish_model ties them
    other.train()
    _step(torch.optim.Adam)(other)


def _edit_data_in_place(layer):
    layer.S.data.mul_(3)


def _write_through_numpy(layer):
    layer.S.detach().numpy()[0] *= 3


SEEN_WRITES = [
    _step(torch.optim.SGD, foreach=False),
    _step(torch.optim.SGD, foreach=True),
    _step(torch.optim.Adam, foreach=False),
    _step(torch.optim.Adam, foreach=True),
    _step(torch.optim.AdamW, foreach=False),
    _step(torch.optim.AdamW, foreach=True),
    _in_place_edit_of_a_view,
    _assign_data,
    _assign_a_view_of_the_same_memory_to_data,
    _assign_a_parameter,
    _vector_to_parameters,
    _load_state_dict_with_assign,
    _step_through_a_layer_that_shares_the_rule,
]
UNSEEN_WRITES = [  # writes no version counter sees (fused kernels, .data, NumPy): no H to go stale either
    _step(torch.optim.SGD, fused=True),
    _step(torch.optim.Adam, fused=True),
    _step(torch.optim.AdamW, fused=True),
    _fairseq_adam_step,
    _edit_data_in_place,
    _write_through_numpy,
]


def eval_layer():
    # a custom loop or evaluation hook: the layer stays in eval mode throughout
    return with_path(PHMLinear(8, 8, n=2), "weight").eval()


@pytest.mark.parametrize("write", SEEN_WRITES, ids=lambda write: write.__name__)
def test_inference_weight_is_never_stale_after_a_write_the_version_counters_see(write):
    layer, x = eval_layer(), torch.randn(4, 8)
    with torch.no_grad():
        before = layer(x)  # builds H (and keeps nothing)
    write(layer)
    with torch.no_grad():
        after = layer(x)
    expected = definition(layer, x)
    assert not torch.allclose(expected, before)
    torch.testing.assert_close(after, expected)


@pytest.mark.parametrize("write", SEEN_WRITES[:6] + UNSEEN_WRITES[:4], ids=lambda write: write.__name__)
def test_a_loop_that_switches_train_and_eval_is_never_stale_whatever_the_optimizer(write):
    layer, x = eval_layer(), torch.randn(4, 8)
    for _ in range(2):
        with torch.no_grad():
            layer(x)
        layer.train()
        write(layer)
        layer.eval()
        with torch.no_grad():
            torch.testing.assert_close(layer(x), definition(layer, x))


# --- eval mode computes with the tensors bound at call time ----------------------------------------


@LOW_RANK_SAVES_NOTHING
@pytest.mark.parametrize("kind", list(LAYERS))
@pytest.mark.parametrize("warm", [True, False], ids=["warm", "cold"])
def test_functional_call_computes_with_the_tensors_it_is_given(kind, warm):
    layer = with_path(LAYERS[kind](16, 32, 4), "weight").eval()
    x = torch.randn(5, 16)
    with torch.no_grad():
        own = layer(x) if warm else None  # a forward before: nothing of it may be kept
        out = torch.func.functional_call(layer, zeros_for(layer), (x,))
        assert torch.equal(out, torch.zeros(5, 32)), "functional_call must use the zeros it was given"
        after = layer(x)  # the layer's own tensors again: not the H of the zeros
    torch.testing.assert_close(after, definition(layer, x))
    if warm:
        torch.testing.assert_close(after, own)


def test_functional_call_of_a_model_soup_and_of_the_layer_itself():
    layer, other = PHMLinear(16, 32, n=4).eval(), PHMLinear(16, 32, n=4)
    soup = {name: (p + dict(other.named_parameters())[name]).detach() / 2 for name, p in layer.named_parameters()}
    x = torch.randn(6, 16)
    with torch.no_grad():
        layer(x)
        out = torch.func.functional_call(layer, soup, (x,))
        same = torch.func.functional_call(layer, dict(layer.named_parameters()), (x,))
    weight = kronecker_sum(soup["A"], soup["S"])
    torch.testing.assert_close(out, nn.functional.linear(x, weight, soup["bias"]))
    torch.testing.assert_close(same, definition(layer, x))


def test_torch_func_vmap_and_grad_through_functional_call_in_eval_mode():
    layer = PHMLinear(16, 32, n=4).eval()
    x = torch.randn(5, 16)
    members = [PHMLinear(16, 32, n=4) for _ in range(3)]
    stacked = {
        name: torch.stack([dict(m.named_parameters())[name].detach() for m in members])
        for name, _ in layer.named_parameters()
    }
    with torch.no_grad():
        layer(x)  # warm
        ensemble = torch.func.vmap(lambda params: torch.func.functional_call(layer, params, (x,)))(stacked)
        for member, out in zip(members, ensemble):
            torch.testing.assert_close(out, definition(member, x))
        torch.testing.assert_close(layer(x), definition(layer, x))
        grads = torch.func.grad(lambda params: torch.func.functional_call(layer, params, (x,)).square().sum())(
            dict(layer.named_parameters())
        )
    layer.zero_grad()
    layer(x).square().sum().backward()  # eval mode, gradients enabled: the same function
    for name, p in layer.named_parameters():
        torch.testing.assert_close(grads[name], p.grad)


def _meta_then_to_empty(layer):
    empty = PHMLinear(16, 32, n=4, device="meta").to_empty(device="cpu")
    empty.load_state_dict(layer.state_dict())
    return empty


def _swap_tensors(layer):
    for p in list(layer.parameters()):
        torch.utils.swap_tensors(p, nn.Parameter(p.detach().clone()))
    return layer


def _double_with_swap_on_conversion(layer):
    torch.__future__.set_swap_module_params_on_conversion(True)
    try:
        return layer.double().float()
    finally:
        torch.__future__.set_swap_module_params_on_conversion(False)


@pytest.mark.parametrize("convert", [_meta_then_to_empty, _swap_tensors, _double_with_swap_on_conversion])
def test_inference_weight_sees_writes_after_to_empty_swap_tensors_and_swapping_conversions(convert):
    layer = convert(PHMLinear(16, 32, n=4)).eval()
    x = torch.randn(5, 16)
    for write in (
        lambda: setattr(layer.S, "data", torch.randn_like(layer.S)),
        lambda: setattr(layer.A, "data", torch.randn_like(layer.A)),
        lambda: layer.S.detach().mul_(2),
        lambda: layer.load_state_dict(PHMLinear(16, 32, n=4).state_dict()),
    ):
        with torch.no_grad():
            before = layer(x)
            write()
            after = layer(x)
        assert not torch.allclose(after, before)
        torch.testing.assert_close(after, definition(layer, x))


def test_inference_weight_sees_a_swap_whose_version_counter_matches():
    layer = PHMLinear(16, 32, n=4).eval()
    x = torch.randn(5, 16)
    with torch.no_grad():
        before = layer(x)
        new = nn.Parameter(torch.randn_like(layer.S))
        while new._version < layer.S._version:
            new.add_(0)  # the same version count as the tensor it replaces
        torch.utils.swap_tensors(layer.S, new)
        after = layer(x)
    assert not torch.allclose(after, before)
    torch.testing.assert_close(after, definition(layer, x))


@LOW_RANK_SAVES_NOTHING
def test_factors_are_plain_parameters_and_copies_follow_their_own_factors(tmp_path):
    layer = PHMLinear(8, 8, n=2, rank=2).eval()
    assert all(type(t) is nn.Parameter for t in (layer.A, layer.S_left, layer.S_right))
    x = torch.randn(3, 8)
    with torch.no_grad():
        layer(x)  # warm
    torch.save(layer, tmp_path / "layer.pt")
    for copied in (copy.deepcopy(layer), torch.load(tmp_path / "layer.pt", weights_only=False)):
        with torch.no_grad():
            copied.S_left.mul_(2)
            torch.testing.assert_close(copied(x), definition(copied, x))
            torch.testing.assert_close(layer(x), definition(layer, x))


# --- low-rank S_i (rank R: S_i = S_left_i @ S_right_i) -------------------------------------------


@LOW_RANK_SAVES_NOTHING
def test_low_rank_weight_is_the_kronecker_sum_of_the_factor_products():
    layer = PHMLinear(12, 8, n=4, rank=2)
    S = [layer.S_left[i] @ layer.S_right[i] for i in range(4)]
    torch.testing.assert_close(layer.weight, sum(torch.kron(layer.A[i], S[i]) for i in range(4)))
    A, S_built = layer.kronecker_factors()
    assert A is layer.A and S_built.shape == (4, 2, 3) and layer.S is None
    assert set(layer.state_dict()) == {"A", "S_left", "S_right", "bias"}


@LOW_RANK_SAVES_NOTHING
@pytest.mark.parametrize("n,k,d,rank,bias", [(2, 8, 8, 1, True), (4, 64, 32, 3, False), (8, 512, 256, 8, True)])
def test_low_rank_parameter_count_is_rank_times_k_plus_d_plus_n_cubed(n, k, d, rank, bias):
    layer = PHMLinear(d, k, n=n, bias=bias, rank=rank)
    assert sum(p.numel() for p in layer.parameters()) == rank * (k + d) + n**3 + (k if bias else 0)
    assert f"rank={rank}, " in repr(layer)


@LOW_RANK_SAVES_NOTHING
@pytest.mark.parametrize("n,rule", itertools.product([2, 4, 8, 16], ["learned", "algebra-init"]))
@pytest.mark.parametrize("rank", [4, 16])
@pytest.mark.parametrize("d,k,gain", [(512, 2048, 1.0), (256, 256, 2**-0.5)])
def test_low_rank_variance_of_h_matches_the_dense_xavier_target(n, rule, rank, d, k, gain):
    ratio = PHMLinear(d, k, n=n, rule=rule, gain=gain, rank=rank).weight.var().item() / xavier_variance(d, k, gain)
    assert 0.8 < ratio < 1.2, f"Var(H) is {ratio:.2f}x the xavier target"


@pytest.mark.parametrize("n", [2, 4, 8, 16])
def test_rank_one_variance_matches_the_target_on_average(n):
    # one rank-1 layer's sample variance spreads widely (its entries are products u_p v_q); the
    # mean over 16 layers is what the initialisation calibrates
    ratios = [PHMLinear(256, 256, n=n, rank=1).weight.var().item() / xavier_variance(256, 256) for _ in range(16)]
    assert 0.9 < sum(ratios) / len(ratios) < 1.1, ratios


@LOW_RANK_SAVES_NOTHING
def test_low_rank_inference_weight_follows_either_factor():
    layer = PHMLinear(8, 8, n=2, rank=2).eval()
    first = inference_weight(layer)
    with torch.no_grad():
        layer.S_right.mul_(2)
    torch.testing.assert_close(inference_weight(layer), 2 * first)
    with torch.no_grad():
        layer.S_left.mul_(0.5)
    torch.testing.assert_close(inference_weight(layer), first)
    optimizer = torch.optim.SGD(layer.parameters(), lr=0.1)
    layer(torch.randn(3, 8)).sum().backward()  # eval mode, grad enabled: differentiable
    optimizer.step()
    torch.testing.assert_close(inference_weight(layer), layer.build_weight().detach())


@LOW_RANK_SAVES_NOTHING
def test_low_rank_to_dense_and_torchscript_are_equivalent():
    for layer in (PHMLinear(12, 8, n=4, rank=2), PHMLinear(12, 8, n=4)):
        x = torch.randn(4, 12)
        torch.testing.assert_close(layer.to_dense()(x), layer(x))
        torch.testing.assert_close(torch.jit.script(layer)(x), layer(x))


def test_a_rank_that_saves_nothing_is_warned_about():
    with pytest.warns(
        UserWarning,
        match=r"PHM layer 128->128, n=4: rank 32 factors hold 8,192 weights, no fewer "
        r"than the 4,096 of full-rank S_i \(blocks of 32x32\); "
        r"ranks up to 15 save weights",
    ):
        PHMLinear(128, 128, n=4, rank=32)  # the demo size's attention maps at rank 32: still allowed
    with pytest.warns(UserWarning, match=r"PHM layer 8->8, n=4: .* no rank saves weights in a layer this small"):
        PHMLinear(8, 8, n=4, rank=1)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        PHMLinear(128, 128, n=4, rank=8)


# --- one LinearSpec: validation, and the rule shared by every layer ---------------------------------


@pytest.mark.parametrize(
    "kwargs,message",
    [
        (
            dict(kind="phm", n=4, rank=0),
            r"PHM rank must be a positive integer \(or None for full-rank S_i\), got rank=0",
        ),
        (dict(kind="phm", n=4, rank=2.5), r"got rank=2.5"),
        (dict(kind="phm", n=4, shared_rule="layer"), r"unknown shared_rule 'layer': choose one of model, side"),
        (
            dict(kind="phm", n=4, rule="algebra-frozen", shared_rule="model"),
            r"shared_rule='model' with rule='algebra-frozen': a frozen rule is a constant .* nothing to share",
        ),
        (dict(kind="quaternion", rank=4), r"rank=4: n, rule, rank and shared_rule are options of PHM layers"),
        (dict(kind="dense", n=4, shared_rule="side"), r"n=4, shared_rule='side': .* not of dense layers"),
        (dict(kind="phm", n=True), r"positive integer, got n=True"),
    ],
)
def test_spec_refuses_what_it_cannot_build(kwargs, message):
    with pytest.raises(ValueError, match=message):
        LinearSpec(**kwargs)


def test_spec_checks_sizes_by_the_names_the_user_gave():
    spec = LinearSpec("phm", n=3)
    spec.check_sizes({"--encoder-embed-dim": 96, "--encoder-ffn-embed-dim": 384}, n_as="--phm-n")
    with pytest.raises(
        ValueError,
        match=r"^--phm-n 3 must divide every feature size of the model, but does not "
        r"divide --encoder-embed-dim 100; with these sizes --phm-n can be one of "
        r"\[1, 2, 4\]$",
    ):
        spec.check_sizes({"--encoder-embed-dim": 100, "--encoder-ffn-embed-dim": 384}, n_as="--phm-n")
    with pytest.raises(
        ValueError,
        match=r"^n=3 must divide every feature size of the model, but does not divide "
        r"hidden 10; with these sizes n can be one of \[1, 2, 5, 10\]$",
    ):
        spec.check_sizes({"hidden": 10})
    with pytest.raises(
        ValueError,
        match=r"^quaternion \(Hamilton\) layers need feature sizes that are multiples "
        r"of 4, not width 6$",
    ):
        LinearSpec("quaternion").check_sizes({"width": 6})


class TwoSides(nn.Module):
    """An encoder and a decoder of PHM layers (one fused, one low rank), as the models have them."""

    def __init__(self, spec):
        super().__init__()
        self.encoder = nn.Sequential(spec.build(8, 24), spec.build(8, 8))
        self.decoder = nn.Sequential(spec.build(8, 8), spec.build(8, 16, bias=False))
        spec.finish_model(self, sides=(self.encoder, self.decoder))

    def layers(self):
        return [*self.encoder, *self.decoder]


@LOW_RANK_SAVES_NOTHING
@pytest.mark.parametrize("rank", [None, 2])
def test_shared_rule_model_ties_one_a_to_every_layer(rank):
    spec = LinearSpec("phm", n=4, rank=rank, shared_rule="model")
    model = TwoSides(spec)
    A = model.encoder[0].A
    assert all(layer.A is A for layer in model.layers())
    per_layer = sum(p.numel() for layer in model.layers() for p in layer.parameters() if p is not A)
    assert sum(p.numel() for p in model.parameters()) == per_layer + 4**3  # A counted once
    assert count_parameters(model).total == per_layer + 4**3
    assert len(list(model.state_dict())) == len(list(TwoSides(LinearSpec("phm", n=4, rank=rank)).state_dict()))


def test_shared_rule_side_ties_one_a_per_side():
    model = TwoSides(LinearSpec("phm", n=4, shared_rule="side"))
    encoder_A, decoder_A = model.encoder[0].A, model.decoder[0].A
    assert encoder_A is not decoder_A
    assert model.encoder[1].A is encoder_A and model.decoder[1].A is decoder_A
    # a model with one side (a classifier): side and model are the same
    single = nn.Sequential(LinearSpec("phm", n=2).build(4, 4), LinearSpec("phm", n=2).build(4, 8))
    LinearSpec("phm", n=2, shared_rule="side").finish_model(single)
    assert single[0].A is single[1].A


def test_shared_rule_keeps_the_variance_of_every_layer():
    spec = LinearSpec("phm", n=4, shared_rule="model")
    layers = nn.ModuleList(spec.build(256, 256) for _ in range(4))
    spec.finish_model(layers)
    for layer in layers:
        assert 0.8 < layer.weight.var().item() / xavier_variance(256, 256) < 1.2


@LOW_RANK_SAVES_NOTHING
def test_a_step_through_one_layer_changes_every_layer_that_shares_its_rule():
    model = TwoSides(LinearSpec("phm", n=4, rank=2, shared_rule="model")).eval()
    before = [inference_weight(layer) for layer in model.layers()]
    optimizer = torch.optim.SGD(model.parameters(), lr=0.5)
    model.decoder[1](torch.randn(5, 8)).pow(2).sum().backward()  # only the last layer's output
    assert model.encoder[0].S_left.grad is None and model.encoder[0].A.grad is not None
    optimizer.step()
    for layer, h in zip(model.layers(), before):
        after = inference_weight(layer)
        assert not torch.equal(after, h), "every layer computes with the new A"
        torch.testing.assert_close(after, layer.build_weight().detach())


def test_shared_rule_survives_load_state_dict_copies_and_moves():
    spec = LinearSpec("phm", n=4, shared_rule="model")
    trained, fresh = TwoSides(spec), TwoSides(spec)
    with torch.no_grad():
        trained.encoder[0].A.add_(1.0)
    fresh.load_state_dict(trained.state_dict())
    assert all(layer.A is fresh.encoder[0].A for layer in fresh.layers())
    x = torch.randn(3, 8)
    torch.testing.assert_close(fresh.decoder[0](x), trained.decoder[0](x))
    for model in (copy.deepcopy(fresh), fresh.double(), fresh.half(), fresh.to(torch.float32)):
        assert all(layer.A is model.encoder[0].A for layer in model.layers())


def test_a_saved_shared_rule_is_one_storage(tmp_path):
    model = TwoSides(LinearSpec("phm", n=8, shared_rule="model"))
    untied = TwoSides(LinearSpec("phm", n=8))
    torch.save(model.state_dict(), tmp_path / "tied.pt")
    torch.save(untied.state_dict(), tmp_path / "untied.pt")
    saved = (tmp_path / "untied.pt").stat().st_size - (tmp_path / "tied.pt").stat().st_size
    assert saved >= 3 * 8**3 * 4  # three of the four A's (4 bytes each) are not stored again


def test_a_layer_made_under_inference_mode_follows_its_writes():
    # inference tensors have no version counter: such a layer builds H at every call
    x = torch.randn(5, 16)
    with torch.inference_mode():
        layer = PHMLinear(16, 32, n=4).eval()
        torch.testing.assert_close(layer(x), definition(layer, x))
        layer.load_state_dict(PHMLinear(16, 32, n=4).state_dict())
        torch.testing.assert_close(layer(x), definition(layer, x))


def test_layer_and_spec_share_one_validation_without_an_import_cycle():
    import ast
    import inspect

    from phm_fairseq.modules import linear_spec, phm_linear

    def imported(module, top_level_only=False):
        tree = ast.parse(inspect.getsource(module))
        nodes = tree.body if top_level_only else ast.walk(tree)
        return {node.module for node in nodes if isinstance(node, ast.ImportFrom)}

    assert "linear_spec" not in imported(phm_linear)  # the layer does not build a spec to check itself
    assert imported(linear_spec) == imported(linear_spec, top_level_only=True)  # no import inside a function
    for kwargs in (dict(n=0), dict(n=4, rank=0), dict(n=3, rule="algebra-init"), dict(n=4, rule="hamilton")):
        with pytest.raises(ValueError) as from_layer:
            PHMLinear(12, 12, **kwargs)
        with pytest.raises(ValueError) as from_spec:
            LinearSpec("phm", **kwargs).build(12, 12)
        assert str(from_layer.value) == str(from_spec.value)
    with pytest.raises(ValueError) as from_layer:
        PHMLinear(10, 8, n=4)
    with pytest.raises(ValueError) as from_spec:
        LinearSpec("phm", n=4).check_layer(10, 8)
    assert str(from_layer.value) == str(from_spec.value)


# --- sizes and numbers as nn.Linear takes them ----------------------------------------------------


@pytest.mark.filterwarnings("ignore:Initializing zero-element tensors")  # nn.Linear's own, in to_dense()
@pytest.mark.parametrize("d,k", [(0, 8), (8, 0), (0, 0)])
@pytest.mark.parametrize("kind", list(LAYERS))
def test_zero_size_layers_work_as_nn_linear(kind, d, k):
    layer = LAYERS[kind](d, k, 4)
    weights = 2 * (d + k) if "rank-2" in kind else d * k // 4
    rule = 0 if kind in ("phm-algebra-frozen", "quaternion") else 4**3
    gains = 4 if "factor-norm" in kind else 0
    assert sum(p.numel() for p in layer.parameters()) == weights + rule + gains + k
    assert torch.equal(layer.bias, torch.zeros(k))  # nn.Linear's bias bound 1/sqrt(fan_in) is 0 at fan_in 0
    repr(layer)
    for rows in (3, 0):
        x = torch.randn(rows, d, requires_grad=True)
        for path in ("factored", "weight"):
            for mode in ("train", "eval"):
                copy_ = getattr(with_path(layer, path), mode)()
                with torch.no_grad():
                    out = copy_(x)
                assert out.shape == (rows, k)
                torch.testing.assert_close(out, nn.functional.linear(x, torch.zeros(k, d), layer.bias))
            copy_(x).sum().backward()
    to_dense = layer.to_dense()
    assert type(to_dense) is nn.Linear and to_dense.weight.shape == (k, d)


@LOW_RANK_SAVES_NOTHING
def test_integral_numbers_are_taken_and_bools_and_floats_refused():
    np = pytest.importorskip("numpy")
    layer = PHMLinear(np.int64(16), np.int32(8), n=np.int64(4), rank=np.int16(2))
    assert (layer.in_features, layer.out_features, layer.n, layer.rank) == (16, 8, 4, 2)
    assert all(type(v) is int for v in (layer.in_features, layer.out_features, layer.n, layer.rank))
    assert layer.S_left.shape == (4, 2, 2) and layer(torch.randn(3, 16)).shape == (3, 8)
    assert PHMLinear(8, 8, n=torch.tensor(2)).n == 2
    assert LinearSpec("phm", n=np.int64(4), rank=np.int64(2)) == LinearSpec("phm", n=4, rank=2)
    assert type(LinearSpec("phm", n=np.int64(4)).n) is int
    for n in (True, np.True_, 4.0, np.float64(4), "4", None):
        with pytest.raises(ValueError, match=r"PHM n must be a positive integer, got n="):
            PHMLinear(8, 8, n=n)
        with pytest.raises(ValueError, match=r"PHM n must be a positive integer, got n="):
            LinearSpec("phm", n=n)
    for rank in (True, 2.0):
        with pytest.raises(ValueError, match=r"PHM rank must be a positive integer"):
            PHMLinear(8, 8, n=2, rank=rank)
    for size in (-4, 8.0, True):
        with pytest.raises(ValueError, match=r"in_features must be a non-negative integer, got in_features="):
            PHMLinear(size, 8, n=2)


@pytest.mark.parametrize(
    "value,rows", [("64", 64), ("0", 0), (" 16 ", 16), ("", None), ("many", "error"), ("-1", "error"),
                   ("8.0", "error"), ("²", "error"), ("٣", "error")]
)  # fmt: skip
def test_the_environment_variable_is_read_or_refused_by_name(monkeypatch, value, rows):
    from phm_fairseq.modules.product_rule import max_rows_from_environment as _rows_from_environment

    monkeypatch.setenv("PHM_FACTORED_MAX_ROWS", value)
    if rows != "error":
        assert _rows_from_environment() == rows
        return
    with pytest.raises(ValueError) as error:
        _rows_from_environment()
    message = str(error.value)
    assert message.startswith(f"PHM_FACTORED_MAX_ROWS={value.strip()!r}: expected a number of rows")
    assert "whole number" in message and "0: always" in message and "unset" in message
