"""A hypercomplex layer's weight H: computed when read (each read the caller's own tensor), never stale,
kept only while the layer is merged for inference, and its tensors made where nn.Linear's factory
arguments say."""

import operator
from pathlib import Path

import pytest
import torch
from torch import nn
from torch.nn import functional as F

from phm_layers import GATE_LAYOUTS, HypercomplexLSTM, LinearSpec, PHMLinear, QuaternionLinear

DATA = Path(__file__).resolve().parent / "fixtures" / "checkpoints" / "data"
LAYERS = {
    "phm": lambda **factory: PHMLinear(8, 12, n=2, **factory),
    "low rank": lambda **factory: PHMLinear(8, 12, n=2, rank=1, **factory),
    "algebra-frozen": lambda **factory: PHMLinear(8, 12, n=4, rule="algebra-frozen", **factory),
    "quaternion": lambda **factory: QuaternionLinear(8, 12, **factory),
}


@pytest.fixture(autouse=True)
def seed():
    torch.manual_seed(0)


def definition(layer, x):
    """F.linear with H built now from the tensors the layer holds."""
    with torch.no_grad():
        return F.linear(x, layer.build_weight(), layer.bias)


def in_mode(layer, mode):
    if mode == "merged":
        return layer.eval().merge()
    return layer.train(mode == "train")


# --- writes into weight (issue 42, item 15; issue 57, item 2; issue 58, item 12) ----------------

WRITES = {
    "nn.init.zeros_": nn.init.zeros_,
    "nn.init.xavier_uniform_": nn.init.xavier_uniform_,
    "copy_": lambda w: w.copy_(torch.zeros_like(w)),
    "item assignment": lambda w: w.__setitem__(0, 1.0),
    "+=": lambda w: operator.iadd(w, 1.0),
    "an in-place write into a view": lambda w: w[0].zero_(),
    "through .data": lambda w: w.data.normal_(),
    "through detach()": lambda w: w.detach().mul_(2),
    "assigning .data": lambda w: setattr(w, "data", torch.zeros_like(w)),
    "out=": lambda w: torch.add(w, 1.0, out=w),
    "through numpy()": lambda w: w.numpy().__setitem__(Ellipsis, 0.0),
    "through its storage": lambda w: w.untyped_storage().fill_(0),
}

ASSIGNMENT = (
    "PHMLinear.weight is H = sum_i A_i kron S_i, computed from A and S when read, and cannot be assigned. For the "
    "layer nearest to a dense weight W (keeping its bias), call phm_layers.fit_phm_layer(layer, W), which "
    "returns how near it came; or change A and S: in place under torch.no_grad(), with load_state_dict() or "
    "reset_parameters()"
)


@pytest.mark.parametrize("mode", ["train", "eval", "merged"])
@pytest.mark.parametrize("write", list(WRITES))
def test_a_write_into_weight_changes_the_callers_tensor_and_never_the_layer_in_every_mode(write, mode):
    """weight is computed, as torch.nn.utils.parametrize's: every read is a new tensor, the caller's own. A
    merged layer hands out a copy of its H: no write through NumPy or the storage reaches it (issue 58, 12)."""
    layer = in_mode(PHMLinear(8, 12, n=2), mode)
    layer.factored_max_rows = 0  # the product with H
    x = torch.randn(3, 8)
    with torch.no_grad():
        before, H = layer(x), layer.weight
        weight = layer.weight
        WRITES[write](weight)
        assert not torch.equal(weight, H), "the write changed the caller's tensor"
        torch.testing.assert_close(layer(x), before, rtol=0, atol=0)  # the layer is unchanged
        torch.testing.assert_close(layer.weight, H, rtol=0, atol=0)
        torch.testing.assert_close(layer(x), definition(layer, x))
    assert layer.merged == (mode == "merged")


@pytest.mark.parametrize("kind", list(LAYERS))
def test_every_kind_refuses_assignments_of_its_weight_with_what_to_do_instead(kind):
    layer = LAYERS[kind]()
    factors = "A, S_left and S_right" if kind == "low rank" else "A and S"
    for value in (nn.Parameter(torch.zeros(12, 8)), torch.zeros(12, 8)):
        with pytest.raises(AttributeError) as refused:
            layer.weight = value
        assert str(refused.value) == ASSIGNMENT.replace("A and S", factors).replace("PHMLinear", type(layer).__name__)
    assert "weight" not in layer._parameters and "weight" not in layer.__dict__


def test_the_derived_weight_uses_no_private_torch_functions():
    """PyTorch's own idiom (issue 57, item 2): a property, no Tensor subclass, no torch._C."""
    from phm_layers import derived_weight

    source = Path(derived_weight.__file__).read_text()
    assert "torch._C" not in source and "_functorch" not in source and "__torch_function__" not in source
    assert type(PHMLinear(8, 12, n=2).weight) is torch.Tensor
    assert type(PHMLinear(8, 12, n=2).eval().merge().weight) is torch.Tensor


FITTED = {
    **LAYERS,
    "algebra-init": lambda: PHMLinear(8, 12, n=2, rule="algebra-init"),
    "unshared low-rank term, normalised factors": lambda: PHMLinear(8, 12, n=2, lowrank=2, factor_norm=True),
    "no bias": lambda: PHMLinear(8, 12, n=2, bias=False),
}


@pytest.mark.parametrize("mode", ["train", "merged"])
@pytest.mark.parametrize("kind", list(FITTED))
def test_the_call_that_the_refusal_names_sets_the_weight_and_keeps_the_bias(kind, mode):
    """fit_phm_layer(layer, W), as the message says, on every kind of layer, with a bias or without: H
    becomes the nearest the layer holds to W (W itself where W has the layer's structure), the bias is kept,
    and it stays as strict as before where a bias is given."""
    from phm_layers import fit_phm_layer

    layer = in_mode(FITTED[kind](), mode)
    bias = None if layer.bias is None else layer.bias.detach().clone()
    with torch.no_grad():
        W = in_mode(FITTED[kind](), "train").build_weight()  # a weight that this kind of layer holds exactly
    with pytest.raises(AttributeError) as refused:
        layer.weight = W
    assert "call phm_layers.fit_phm_layer(layer, W)" in str(refused.value)
    factors = fit_phm_layer(layer, W)
    x = torch.randn(3, 8)
    with torch.no_grad():
        H = layer.weight.clone()
        assert float((W - H).norm() / W.norm()) == pytest.approx(factors.relative_error, abs=1e-5)
        torch.testing.assert_close(layer(x), F.linear(x, H, bias), rtol=1e-4, atol=1e-5)
    if kind != "low rank":  # the nearest Kronecker sum's S_i need not have rank 1 where W's did
        torch.testing.assert_close(H, W, rtol=1e-4, atol=1e-5)
    if bias is None:
        assert layer.bias is None
        with pytest.raises(ValueError, match="the layer has no bias, but one was given"):
            fit_phm_layer(layer, W, torch.zeros(12))
    else:
        assert torch.equal(layer.bias, bias)
        with pytest.raises(ValueError, match="the layer has bias, but none was given"):
            fit_phm_layer(layer, W, None)  # None: the dense map has no bias, which this layer cannot be
        fit_phm_layer(layer, 2 * W, torch.ones(12))
        torch.testing.assert_close(layer.bias, torch.ones(12), rtol=0, atol=0)


def test_the_weight_computes_as_a_tensor_and_carries_gradients():
    layer = PHMLinear(8, 12, n=2)
    x = torch.randn(3, 8)
    weight = layer.weight
    computed = [weight * 2, weight @ weight.t(), weight.clone(), weight.detach().clone()]
    assert all(type(t) is torch.Tensor for t in computed)  # ordinary tensors, the caller's own
    computed[2].zero_()
    F.linear(x, weight).square().sum().backward()
    assert layer.A.grad is not None and layer.S.grad is not None
    torch.testing.assert_close(weight, layer.build_weight())


# --- no stale H (issue 42, item 20) --------------------------------------------------------------


def _optimizer_step(optimizer_class, **options):
    def step(layer):
        optimizer = optimizer_class(layer.parameters(), lr=0.5, **options)
        layer(torch.randn(3, 8)).sum().backward()  # eval mode, gradients on: fine-tuning in eval mode
        optimizer.step()

    return step


def _fairseq_adam_step(layer):
    from fairseq.optim.adam import Adam  # adds its update to p.data

    _optimizer_step(Adam)(layer)


def _write_through_numpy(layer):
    layer.S.detach().numpy()[0] *= 3


WRITES_NO_VERSION_COUNTER_SEES = {
    "Adam(fused=True)": _optimizer_step(torch.optim.Adam, fused=True),
    "SGD(fused=True)": _optimizer_step(torch.optim.SGD, fused=True),
    "fairseq's Adam": _fairseq_adam_step,
    "S.data.mul_": lambda layer: layer.S.data.mul_(3),
    "through NumPy": _write_through_numpy,
}


@pytest.mark.parametrize("write", list(WRITES_NO_VERSION_COUNTER_SEES))
def test_eval_mode_computes_with_the_tensors_as_they_are_after_any_write(write):
    layer = PHMLinear(8, 8, n=2).eval()
    layer.factored_max_rows = 0  # the product with H
    x = torch.randn(4, 8)
    with torch.no_grad():
        before = layer(x)
    WRITES_NO_VERSION_COUNTER_SEES[write](layer)
    with torch.no_grad():
        after = layer(x)
    assert not torch.allclose(after, before), "the write changed the layer"
    torch.testing.assert_close(after, definition(layer, x))


# --- merged for inference ------------------------------------------------------------------------


def test_a_merged_layer_computes_with_one_h_until_unmerged_or_trained():
    layer = PHMLinear(8, 12, n=2).eval()
    layer.factored_max_rows = 0
    x = torch.randn(3, 8)
    with torch.no_grad():
        assert layer.current_weight() is not layer.current_weight()  # unmerged: built at every forward
        h = layer.merge().current_weight()
        assert layer.merged and layer.current_weight() is h
        torch.testing.assert_close(layer(x), definition(layer, x))
    assert not layer.unmerge().merged
    layer.merge().train()
    assert not layer.merged, "train() unmerges"
    layer.eval()
    assert not layer.merged, "eval() does not merge"


def test_a_merged_forward_is_one_product():
    from torch.utils._python_dispatch import TorchDispatchMode

    class Ops(TorchDispatchMode):
        def __init__(self):
            super().__init__()
            self.ops = []

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            self.ops.append(str(func.overloadpacket))
            return func(*args, **(kwargs or {}))

    layer = PHMLinear(8, 12, n=2, rank=1).eval().merge()
    layer.factored_max_rows = 0
    x = torch.randn(3, 8)
    with torch.no_grad(), Ops() as seen:
        layer(x)
    assert seen.ops == ["aten.t", "aten.addmm"], "F.linear alone: no H built, no tensor read to check it"


def test_a_merged_layer_refuses_to_compute_gradients_for_its_factors():
    layer = PHMLinear(8, 12, n=2).eval().merge()
    layer.factored_max_rows = 0
    x = torch.randn(3, 8, requires_grad=True)
    with pytest.raises(RuntimeError, match=r"merged for inference .* call unmerge\(\) \(or train\(\)\) first"):
        layer(x)
    layer.requires_grad_(False)  # gradients for the input only: nothing can change H behind it
    layer(x).sum().backward()
    assert x.grad is not None


@pytest.mark.parametrize("kind", list(LAYERS))
def test_a_merged_layers_weight_reads_with_gradients_on(kind):
    """Reading weight (its shape, its values) never raises: while merged it is the merged H, and where
    gradients are on for the factors, H built now, through which they get them (issue 58, item 12)."""
    layer = LAYERS[kind]().eval().merge()
    assert torch.is_grad_enabled() and layer.weight.shape == (12, 8)
    weight = layer.weight
    assert weight.requires_grad
    torch.testing.assert_close(weight.detach(), definition_weight(layer))
    weight.sum().backward()
    assert all(t.grad is not None for t in layer.parameters() if t is not layer.bias)
    with torch.no_grad():
        assert not layer.weight.requires_grad and torch.equal(layer.weight, layer.current_weight())
    assert layer.merged


def definition_weight(layer):
    with torch.no_grad():
        return layer.build_weight()


@pytest.mark.parametrize("kind", list(LAYERS))
def test_a_merged_layer_computes_with_what_reset_parameters_draws(kind):
    """reset_parameters() after merge() merges again (issue 58, item 12), as load_state_dict does."""
    layer = LAYERS[kind]().eval().merge()
    layer.factored_max_rows = 0  # the product with H
    x = torch.randn(3, 8)
    with torch.no_grad():
        before = layer(x)
        layer.reset_parameters()
        assert layer.merged
        after = layer(x)
    assert not torch.allclose(after, before), "the reset drew new factors"
    torch.testing.assert_close(after, definition(layer, x))


def test_load_state_dict_and_moves_merge_again():
    layer, other = PHMLinear(8, 12, n=2).eval().merge(), PHMLinear(8, 12, n=2)
    layer.factored_max_rows = 0
    x = torch.randn(3, 8)
    layer.load_state_dict(other.state_dict())
    with torch.no_grad():
        assert layer.merged
        torch.testing.assert_close(layer(x), definition(other, x))
        layer.double()
        assert layer.merged and layer.current_weight().dtype == torch.float64
        torch.testing.assert_close(layer(x.double()), definition(other, x).double())
        layer.half()  # a move keeps a merged layer merged, in the new dtype
        assert layer.merged and layer.current_weight().dtype == torch.float16
        torch.testing.assert_close(layer(x.half()).float(), definition(other, x), atol=0.01, rtol=0.01)


def test_functional_call_of_a_merged_layer_uses_the_tensors_it_is_given():
    layer = PHMLinear(8, 12, n=2).eval().merge()
    layer.factored_max_rows = 0
    zeros = {name: torch.zeros_like(t) for name, t in layer.named_parameters()}
    x = torch.randn(3, 8)
    with torch.no_grad():
        assert torch.equal(torch.func.functional_call(layer, zeros, (x,)), torch.zeros(3, 12))
        torch.testing.assert_close(layer(x), definition(layer, x))


def test_fairseq_prepares_a_model_for_inference_by_merging_every_layer(monkeypatch):
    """fairseq-generate, fairseq-interactive and the hub interface call prepare_for_inference_, which calls
    make_generation_fast_: decoding then builds no H at any step, and the model cannot be trained."""
    from fixtures.make_checkpoints import CHECKPOINTS, build_model

    data, arguments = CHECKPOINTS["phm_fused"]
    model = build_model(DATA / data, arguments)
    layers = [m for m in model.modules() if isinstance(m, PHMLinear)]
    monkeypatch.setattr(PHMLinear, "factored_max_rows", 0)  # every map multiplies by H
    src, prev = torch.randint(4, 12, (2, 5)), torch.randint(4, 12, (2, 4))
    with torch.no_grad():
        expected = model.eval()(src, torch.full((2,), 5), prev)[0]
    model.make_generation_fast_(beamable_mm_beam_size=5, need_attn=False)
    assert layers and all(layer.merged for layer in layers)
    # the weights read with gradients on, as a user of the hub interface may (issue 58, item 12)
    assert all(layer.weight.shape == (layer.out_features, layer.in_features) for layer in layers)
    builds = []
    monkeypatch.setattr(PHMLinear, "build_weight", lambda self: builds.append(self) or kronecker_of(self))
    with torch.no_grad():
        encoder_out = model.encoder(src, src_lengths=torch.full((2,), 5))
        state = {}
        steps = [model.decoder(prev[:, : t + 1], encoder_out, incremental_state=state)[0][:, -1] for t in range(4)]
    assert builds == [], "no H built while decoding"
    torch.testing.assert_close(torch.stack(steps, dim=1), expected, rtol=1e-5, atol=1e-5)
    with pytest.raises(RuntimeError, match="cannot train after make_generation_fast"):
        model.train()


def kronecker_of(layer):
    from phm_layers import kronecker_sum

    return kronecker_sum(*layer.kronecker_factors())


# --- factory arguments (issue 42, item 13) -------------------------------------------------------

MODULES = {
    **LAYERS,
    **{
        f"HypercomplexLSTM {kind} {layout}": (
            lambda spec=spec, layout=layout, **factory: HypercomplexLSTM(
                8, 8, spec, num_layers=2, bidirectional=True, gate_layout=layout, **factory
            )
        )
        for kind, spec in {
            "phm": LinearSpec("phm", n=2),
            "quaternion": LinearSpec("quaternion"),
            "dense": LinearSpec("dense"),
        }.items()
        for layout in GATE_LAYOUTS
    },
    **{
        f"LinearSpec {kind}": lambda spec=spec, **factory: spec.build(8, 12, **factory)
        for kind, spec in {"phm": LinearSpec("phm", n=4), "quaternion": LinearSpec("quaternion")}.items()
    },
    "LinearSpec dense": lambda **factory: LinearSpec("dense").build(8, 12, **factory),
}


@pytest.mark.parametrize("name", list(MODULES))
def test_factory_arguments_make_every_tensor_where_and_as_asked(name):
    module = MODULES[name](device="meta", dtype=torch.float64)
    tensors = list(module.parameters()) + list(module.buffers())
    assert tensors and all(t.is_meta and t.dtype == torch.float64 for t in tensors)
