"""Modules built on the meta device (how FSDP and large-model loading build them), and a proof without a
GPU that the plugin's modules make no tensor on another device than the model's: they run on fake tensors
(FakeTensorMode), which hold no memory and raise at any op that mixes a CPU tensor with theirs, as CUDA
does. Fake CUDA tensors where a CPU-only PyTorch can run them (no autograd graph, no copies into a new
layout), fake tensors on the meta device, another device than the CPU, everywhere else."""

from pathlib import Path

import pytest
import torch
from fixtures.make_checkpoints import CHECKPOINTS, TINY_TRANSFORMER, TRANSLATION, build_model, model_output
from torch._subclasses.fake_tensor import FakeTensor, FakeTensorMode

from phm_fairseq.models.attention import HypercomplexMultiheadAttention
from phm_fairseq.models.quaternion_attention import QuaternionMultiheadAttention
from phm_fairseq.modules import (
    HypercomplexLSTM,
    LinearSpec,
    PHMLinear,
    QuaternionLinear,
    multiplication_rule,
    structure_constants,
)

DATA = Path(__file__).resolve().parent / "fixtures" / "checkpoints" / "data"
CUDA, META = torch.device("cuda", 0), torch.device("meta")


def attention(kind, **options):
    return kind(16, 2, self_attention=True, **options)


MODULES = {  # name -> (module, its input)
    "PHM": (lambda: PHMLinear(8, 12, n=2), lambda: (torch.randn(3, 8),)),
    "PHM algebra-init": (lambda: PHMLinear(8, 12, n=2, rule="algebra-init"), lambda: (torch.randn(3, 8),)),
    "PHM algebra-frozen": (lambda: PHMLinear(8, 12, n=4, rule="algebra-frozen"), lambda: (torch.randn(3, 8),)),
    "PHM low rank": (lambda: PHMLinear(8, 12, n=2, rank=1), lambda: (torch.randn(3, 8),)),
    "PHM low-rank term": (lambda: PHMLinear(8, 12, n=2, lowrank=2), lambda: (torch.randn(3, 8),)),
    "PHM factor norm": (lambda: PHMLinear(8, 12, n=2, factor_norm=True), lambda: (torch.randn(3, 8),)),
    "quaternion": (lambda: QuaternionLinear(8, 12), lambda: (torch.randn(3, 8),)),
    "LSTM PHM": (
        lambda: HypercomplexLSTM(8, 8, LinearSpec("phm", n=2), num_layers=2, bidirectional=True),
        lambda: (torch.randn(5, 2, 8),),
    ),
    "LSTM quaternion fused": (
        lambda: HypercomplexLSTM(8, 8, LinearSpec("quaternion"), gate_layout="fused"),
        lambda: (torch.randn(5, 2, 8),),
    ),
    "attention PHM fused": (
        lambda: attention(HypercomplexMultiheadAttention, linear=LinearSpec("phm", n=4), fused_qkv=True),
        lambda: (torch.randn(4, 2, 16),) * 3,
    ),
    "attention quaternion (Tay et al.)": (
        lambda: attention(QuaternionMultiheadAttention, linear=LinearSpec("quaternion")),
        lambda: (torch.randn(4, 2, 16),) * 3,
    ),
}
# reset_parameters() draws what construction draws (attention: fairseq's own layers are drawn first)
RESET_AS_BUILT = [name for name in MODULES if not name.startswith("attention")]


def output(module, inputs):
    out = module(*inputs)
    return out[0] if isinstance(out, tuple) else out


def on_meta(make):
    with torch.device("meta"):
        module = make()
    assert all(t.is_meta for t in [*module.parameters(), *module.buffers()])
    return module


# --- meta construction, then to_empty() and load_state_dict() or reset_parameters() (issue 42, item 2) ----


@pytest.mark.parametrize("name", list(MODULES))
def test_a_module_built_on_the_meta_device_loads_and_computes_as_the_original(name):
    make, inputs = MODULES[name]
    torch.manual_seed(0)
    original, x = make().eval(), inputs()
    twin = on_meta(make).to_empty(device="cpu")
    twin.load_state_dict(original.state_dict(), strict=True)
    with torch.no_grad():
        torch.testing.assert_close(output(twin.eval(), x), output(original, x), rtol=0, atol=0)


@pytest.mark.parametrize("name", list(MODULES))
def test_a_meta_module_loaded_with_assign_lives_on_the_device_of_the_loaded_tensors(name):
    make, inputs = MODULES[name]
    original, x = make().eval(), inputs()
    twin = on_meta(make)
    twin.load_state_dict(original.state_dict(), strict=True, assign=True)
    assert not any(t.is_meta for t in [*twin.parameters(), *twin.buffers()])
    with torch.no_grad():
        torch.testing.assert_close(output(twin.eval(), x), output(original, x), rtol=0, atol=0)


@pytest.mark.parametrize("name", RESET_AS_BUILT)
def test_reset_parameters_after_to_empty_gives_what_construction_gives(name):
    make, _inputs = MODULES[name]
    torch.manual_seed(1)
    built = make()
    twin = on_meta(make).to_empty(device="cpu")
    torch.manual_seed(1)
    twin.reset_parameters()
    expected = {**dict(built.named_parameters()), **dict(built.named_buffers())}
    got = {**dict(twin.named_parameters()), **dict(twin.named_buffers())}
    assert list(got) == list(expected)
    for key in expected:
        assert torch.equal(got[key], expected[key]), key


LAYER_KINDS = [name for name in RESET_AS_BUILT if name.startswith(("PHM", "quaternion"))]


@pytest.mark.parametrize("name", LAYER_KINDS)
def test_a_layer_merged_on_the_meta_device_computes_with_what_reset_parameters_draws(name):
    """meta, eval().merge(), to_empty(), reset_parameters(): the layer merged what was drawn, not what
    to_empty() left in memory (issue 58, item 12: PHM gave NaN, the quaternion layer was off by 102)."""
    make, inputs = MODULES[name]
    torch.manual_seed(1)
    built = make().eval()
    twin = on_meta(make).eval().merge().to_empty(device="cpu")
    torch.manual_seed(1)
    twin.reset_parameters()
    assert twin.merged
    x = inputs()
    with torch.no_grad():
        for limit in (0, 10**9):  # the product with H, the factored product
            built.factored_max_rows = twin.factored_max_rows = limit
            torch.testing.assert_close(twin(*x), built(*x), rtol=0, atol=0)


def test_a_shared_rule_stays_one_parameter_through_to_empty():
    """to_empty() makes new Parameters module by module; a rule shared by several layers stays one
    (issue 58, item 13: the model held one A per layer after it)."""
    spec = LinearSpec("phm", n=4, shared_rule="model")

    def make():
        return spec.finish_model(torch.nn.Sequential(spec.build(8, 16), spec.build(16, 16), spec.build(16, 8)))

    original = make()
    twin = on_meta(make).to_empty(device="cpu")
    assert len({id(layer.A) for layer in twin}) == 1
    assert len(list(twin.parameters())) == len(list(original.parameters())) == 1 + 2 * 3
    twin.load_state_dict(original.state_dict())
    assert twin[0].A is twin[1].A is twin[2].A
    twin(torch.randn(3, 8)).sum().backward()
    with torch.no_grad():
        twin[0].A.add_(1.0)  # an optimizer's step, through one layer: all of them see it
    assert torch.equal(twin[2].A, original[2].A + 1.0)


def test_a_shared_rule_stays_one_parameter_through_load_state_dict_with_assign(tmp_path):
    """load_state_dict(assign=True) makes a Parameter of each module's checkpoint tensor; the layers that
    share a rule, whose checkpoint tensors share their memory, keep one."""
    spec = LinearSpec("phm", n=4, shared_rule="model")

    def make():
        return spec.finish_model(torch.nn.Sequential(spec.build(8, 16), spec.build(16, 16), spec.build(16, 8)))

    original = make()
    torch.save(original.state_dict(), tmp_path / "tied.pt")
    for state in (original.state_dict(), torch.load(tmp_path / "tied.pt", weights_only=True)):
        twin = on_meta(make)
        twin.load_state_dict(state, assign=True)
        assert twin[0].A is twin[1].A is twin[2].A
        assert len(list(twin.parameters())) == len(list(original.parameters()))
    # tensors that only hold equal values are not tied by a load
    untied = {key: t.clone() for key, t in original.state_dict().items()}
    twin = on_meta(make)
    twin.load_state_dict(untied, assign=True)
    assert twin[0].A is not twin[1].A


def test_the_attention_constants_are_set_again_by_reset_parameters():
    twin = on_meta(MODULES["attention quaternion (Tay et al.)"][0]).to_empty(device="cpu")
    twin.reset_parameters()
    assert torch.equal(twin.hamilton, structure_constants(4).float())
    assert torch.equal(twin.q_proj.A, multiplication_rule(4))
    assert all(torch.isfinite(p).all() for p in twin.parameters())


def test_constants_made_first_on_the_meta_device_are_right_everywhere_after():
    from phm_fairseq.modules.algebra import _structure_constants

    _structure_constants.cache_clear()  # as in a fresh process whose first layer is built on the meta device
    on_meta(lambda: QuaternionLinear(8, 8))
    assert torch.equal(QuaternionLinear(8, 8).A, multiplication_rule(4))
    assert multiplication_rule(4).device.type == "cpu" and multiplication_rule(4).abs().sum() == 16


MODELS = {  # every model family of the fixtures, the two rules that hold a constant or a shared A, PHYDI
    **CHECKPOINTS,
    "phm_algebra_frozen": (
        "translation",
        [*TRANSLATION, "--arch", "phm_transformer_demo", "--phm-n", "4", "--phm-rule", "algebra-frozen"]
        + TINY_TRANSFORMER,
    ),
    "phm_shared_rule_rank": (
        "translation",
        [*TRANSLATION, "--arch", "phm_transformer_demo", "--phm-n", "4", "--phm-shared-rule", "model"]
        + ["--phm-rank", "1", *TINY_TRANSFORMER],
    ),
    "phm_phydi": (  # PHYDI's residual gates: parameters that fairseq's layers do not make
        "translation",
        [*TRANSLATION, "--arch", "phm_transformer_demo", "--phm-n", "4", "--phydi", *TINY_TRANSFORMER],
    ),
}


def net_input_of(name):
    fixture = name if name in CHECKPOINTS else "phm_fused"  # the same data
    return torch.load(DATA.parent / f"{fixture}.output.pt", weights_only=True)["net_input"]


@pytest.mark.parametrize("name", list(MODELS))
def test_a_model_built_on_the_meta_device_loads_and_computes_as_the_original(name):
    data, arguments = MODELS[name]
    original = build_model(DATA / data, arguments).eval()
    with torch.no_grad():
        for gate in (p for key, p in original.named_parameters() if key.endswith("residual_gate")):
            gate.fill_(0.5)  # PHYDI's gates start at 0: away from it, every branch counts
    with torch.device("meta"):
        twin = build_model(DATA / data, arguments)
    assert all(p.is_meta for p in twin.parameters())
    twin.to_empty(device="cpu").load_state_dict(original.state_dict(), strict=True)
    rules = {id(layer.A) for layer in original.modules() if isinstance(layer, PHMLinear)}
    assert len({id(layer.A) for layer in twin.modules() if isinstance(layer, PHMLinear)}) == len(rules)
    net_input = net_input_of(name)
    with torch.no_grad():
        torch.testing.assert_close(model_output(twin.eval(), net_input), model_output(original, net_input))


# --- the meta device in eval mode (issue 42, item 12) -----------------------------------------------------


@pytest.mark.parametrize("merged", [False, True], ids=["unmerged", "merged"])
def test_a_meta_layer_computes_shapes_at_every_call_in_eval_mode(merged):
    layer = on_meta(lambda: PHMLinear(64, 128, n=4)).eval()
    if merged:
        layer.merge()
    with torch.no_grad():
        for rows in (300, 300, 3, 3):
            for path in (0, 10**9):  # the product with H, the factored product
                layer.factored_max_rows = path
                out = layer(torch.randn(rows, 64, device="meta"))
                assert out.is_meta and out.shape == (rows, 128)


# --- no tensor on another device (issue 41, item 3) -------------------------------------------------------


def to_fake(mode, device):
    """Moves a module built on the meta device, or a tensor, to fake tensors on ``device`` (tied
    parameters stay tied)."""
    fakes = {}  # id -> (tensor, its fake): the tensor kept, so that its id is not reused

    def fake(t):
        if id(t) not in fakes:
            faked = FakeTensor(mode, t.to("meta"), device)
            fakes[id(t)] = t, torch.nn.Parameter(faked, t.requires_grad) if isinstance(t, torch.nn.Parameter) else faked
        return fakes[id(t)][1]

    def convert(module_or_tensor):
        if not isinstance(module_or_tensor, torch.nn.Module):
            return fake(module_or_tensor)
        for module in module_or_tensor.modules():
            for tensors in (module._parameters, module._buffers):
                for name, t in tensors.items():
                    if t is not None:
                        tensors[name] = fake(t)
        return module_or_tensor

    return convert


def on_fake(make, device, gradients):
    mode = FakeTensorMode()
    module = to_fake(mode, device)(on_meta(make))
    module.requires_grad_(gradients)
    return module, mode


@pytest.mark.parametrize("device,gradients", [(CUDA, False), (META, True)], ids=["cuda", "meta"])
@pytest.mark.parametrize("name", list(MODULES))
def test_every_module_computes_on_the_device_of_its_tensors(name, device, gradients):
    make, inputs = MODULES[name]
    module, mode = on_fake(make, device, gradients)
    x = [to_fake(mode, device)(t) for t in inputs()]
    factored = name.startswith(("PHM", "quaternion", "attention"))
    with mode:
        for mode_of_module in ("train", "eval", "merged"):
            module.train(mode_of_module == "train")
            if mode_of_module == "merged":
                for layer in module.modules():
                    if isinstance(layer, PHMLinear):
                        layer.merge()
            for limit in (0, 10**9) if factored else (None,):  # the product with H, the factored product
                for layer in module.modules():
                    if isinstance(layer, PHMLinear):
                        layer.factored_max_rows = limit
                with torch.set_grad_enabled(gradients and mode_of_module != "merged"):
                    out = output(module, x)
                    assert out.device == device
                    if out.requires_grad:
                        out.sum().backward()
    if gradients:
        assert all(p.grad is not None and p.grad.device == device for p in module.parameters())


def test_packed_sequences_go_through_the_lstm_on_the_device_of_its_tensors():
    lstm, mode = on_fake(MODULES["LSTM PHM"][0], CUDA, gradients=False)
    mode.allow_non_fake_inputs = True  # the batch sizes, on the CPU as PyTorch keeps them
    fake = to_fake(mode, CUDA)
    order, state = fake(torch.tensor([1, 0, 2])), fake(torch.zeros(4, 3, 8))
    packed = torch.nn.utils.rnn.PackedSequence(fake(torch.randn(7, 8)), torch.tensor([3, 2, 2]), order, order)
    with mode:  # with a state given: without one, the layer reads the batch size, which fake tensors do not hold
        out, (h, c) = lstm(packed, (state, state))
    assert out.data.device == h.device == c.device == CUDA


@pytest.mark.parametrize("name", [name for name in MODELS if name not in ("dense_lstm_nli", "dense_classifier")])
def test_every_model_familys_layers_compute_and_decode_on_the_device_of_their_tensors(name):
    """The layers of each model built on the meta device, on fake tensors of the meta device: forward and
    backward in training mode, step by step decoding with its incremental state (and beam search's
    reordering of it) in eval mode, both products. (fairseq's embeddings and the loops around the layers
    read their inputs' values, padding and lengths, which fake tensors do not hold.)"""
    data, arguments = MODELS[name]
    mode = FakeTensorMode()
    fake = to_fake(mode, META)
    with torch.device("meta"):
        model = fake(build_model(DATA / data, arguments))  # (fairseq makes its version buffers on the CPU)
    with mode:
        for training in (True, False):
            model.train(training)
            for limit in (0, 10**9):
                for layer in model.modules():
                    if isinstance(layer, PHMLinear):
                        layer.factored_max_rows = limit
                if hasattr(model, "decoder"):
                    out = _decode(model, fake, incremental=not training)
                elif hasattr(model.encoder, "layers"):
                    out = fake(torch.randn(5, 2, model.encoder.embed_tokens.embedding_dim))
                    for layer in model.encoder.layers:
                        out = layer(out, encoder_padding_mask=fake(torch.zeros(2, 5, dtype=torch.bool)))
                else:  # the NLI LSTM's recurrence and classifier
                    lstm = model.encoder.lstm
                    states, _ = lstm(fake(torch.randn(5, 2, lstm.input_size)))
                    u = torch.cat([states.amax(0), states.mean(0)], dim=-1)  # max_mean_pool without its check
                    out = model.classifier(u, u)
                assert out.device == META
                if training:
                    out.sum().backward()
    trained = [p for p in model.parameters() if p.grad is not None]
    assert trained and all(p.grad.device == META for p in trained)


def _decode(model, fake, incremental):
    """The decoder's layers over the encoder's: all at once, or step by step, then once more after beam
    search's reordering of the incremental state."""
    dim = model.encoder.embed_tokens.embedding_dim
    source, padding = fake(torch.randn(6, 2, dim)), fake(torch.zeros(2, 6, dtype=torch.bool))
    for layer in model.encoder.layers:
        source = layer(source, encoder_padding_mask=padding)
    target = fake(torch.randn(4, 2, dim))
    if not incremental:
        x = target
        for layer in model.decoder.layers:
            x, _, _ = layer(x, source, padding, self_attn_mask=fake(torch.zeros(4, 4)))
        return x
    state = {}
    for t in range(4):
        x = target[t : t + 1]
        for layer in model.decoder.layers:
            x, _, _ = layer(x, source, padding, incremental_state=state)
    model.decoder.reorder_incremental_state_scripting(state, fake(torch.tensor([1, 0])))
    x = target[:1]
    for layer in model.decoder.layers:
        x, _, _ = layer(x, source, padding, incremental_state=state)
    return x
