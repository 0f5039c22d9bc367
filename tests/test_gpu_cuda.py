"""The layers and models on CUDA (marked `cuda`; skipped where torch sees no GPU).

Every result on the device is checked against float64 arithmetic on the CPU, from the same parameter and
input values (half-precision ones converted exactly), so only the device's arithmetic is measured, as a
normwise relative error ||y - y_ref|| / ||y_ref||. Stated tolerances, in units of roundoff u of the format
(u = 2^-24 float32, 2^-11 float16, 2^-8 bfloat16): float32 (TF32 off) 1e-5 outright; half precisions
10 u for outputs and 20 u for gradients (float16 5e-3 and 1e-2; bfloat16 4e-2 and 8e-2), whole models
in float16 30 u.

`scripts/gpu/run.sh --cpu-dry-run` runs them on the CPU (PHM_CUDA_TESTS_ON_CPU=1), so that they cannot rot
before a GPU comes; there "cuda" below means the CPU, and the half-precision kernels are the CPU's.
"""

import copy
import os

import pytest
import torch
from torch import nn

from phm_fairseq.modules import RULES, HypercomplexLSTM, LinearSpec, PHMLinear, QuaternionLinear

pytestmark = pytest.mark.cuda

UNIT_ROUNDOFF = {torch.float16: 2.0**-11, torch.bfloat16: 2.0**-8}
FLOAT32_TOLERANCE = 1e-5


@pytest.fixture(scope="module")
def device() -> torch.device:
    if torch.cuda.is_available():
        return torch.device("cuda")
    if os.environ.get("PHM_CUDA_TESTS_ON_CPU") == "1":
        return torch.device("cpu")
    pytest.skip("no CUDA device (PHM_CUDA_TESTS_ON_CPU=1 runs these tests on the CPU)")


@pytest.fixture(autouse=True)
def float32_without_tf32():
    """float32 on the GPU is float32: TF32 (10-bit mantissa) off for matmuls and cuDNN, as it was."""
    saved = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False
    torch.manual_seed(0)
    yield
    torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = saved


def relative_error(value: torch.Tensor, reference: torch.Tensor) -> float:
    value = value.detach().to("cpu", torch.float64)
    return ((value - reference).norm() / reference.norm()).item()


def literal_weight(layer: PHMLinear) -> torch.Tensor:
    """H = sum_i A_i kron S_i in float64 on the CPU, written out (not the layer's contraction)."""
    A = layer.A.detach().to("cpu", torch.float64).requires_grad_()
    if layer.S is not None:
        factors = [layer.S.detach().to("cpu", torch.float64).requires_grad_()]
        S = factors[0]
    else:
        factors = [t.detach().to("cpu", torch.float64).requires_grad_() for t in (layer.S_left, layer.S_right)]
        S = factors[0] @ factors[1]
    return sum(torch.kron(A[i], S[i]) for i in range(layer.n)), [A, *factors]


def reference(layer: PHMLinear, x: torch.Tensor):
    """The layer's output and the gradients of sum(output * weights) for its factors, in float64."""
    H, factors = literal_weight(layer)
    bias = None if layer.bias is None else layer.bias.detach().to("cpu", torch.float64).requires_grad_()
    y = torch.nn.functional.linear(x.detach().to("cpu", torch.float64), H, bias)
    upstream = torch.linspace(-1, 1, y.numel(), dtype=torch.float64).reshape(y.shape)
    (y * upstream).sum().backward()
    return y.detach(), upstream, [t.grad for t in factors] + ([bias.grad] if bias is not None else [])


def layer_tensors(layer: PHMLinear) -> list:
    factors = [layer.A, layer.S] if layer.S is not None else [layer.A, layer.S_left, layer.S_right]
    return factors + ([layer.bias] if layer.bias is not None else [])


LAYERS = {
    **{f"PHM n=4 {rule}": dict(n=4, rule=rule) for rule in RULES},
    "PHM n=2 rank 3": dict(n=2, rank=3),
    "PHM n=8": dict(n=8),
    "PHM n=4 no bias": dict(n=4, bias=False),
}


def make(name: str) -> PHMLinear:
    return QuaternionLinear(64, 96) if name == "quaternion" else PHMLinear(64, 96, **LAYERS[name])


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16], ids=str)
@pytest.mark.parametrize("product", ["H", "factored"])
@pytest.mark.parametrize("name", [*LAYERS, "quaternion"])
def test_forward_and_backward_on_the_device_match_float64_on_the_cpu(device, name, product, dtype):
    layer = make(name).to(device, dtype)
    # 5 rows: decoding's few rows, where the factored product is taken
    layer.factored_max_rows = 0 if product == "H" else 10**9
    x = torch.randn(5, 64, device=device, dtype=dtype, requires_grad=True)
    y = layer(x)
    assert y.device == x.device and y.dtype == dtype
    expected, upstream, gradients = reference(layer, x)
    (y * upstream.to(device, dtype)).sum().backward()
    u = UNIT_ROUNDOFF.get(dtype)
    assert relative_error(y, expected) <= (10 * u if u else FLOAT32_TOLERANCE)
    for tensor, gradient in zip(layer_tensors(layer), gradients):
        if tensor.requires_grad:  # a frozen rule (a buffer) has no gradient
            assert tensor.grad.device == x.device
            assert relative_error(tensor.grad, gradient) <= (20 * u if u else FLOAT32_TOLERANCE)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16], ids=str)
def test_a_rule_shared_by_layers_stays_one_tensor_on_the_device_and_gathers_both_gradients(device, dtype):
    model = LinearSpec("phm", n=4, shared_rule="model").finish_model(
        nn.Sequential(PHMLinear(32, 64, 4), PHMLinear(64, 32, 4))
    )
    model.to(device, dtype)
    assert model[0].A is model[1].A and model[0].A.device.type == device.type
    reference_model = copy.deepcopy(model).to("cpu", torch.float64)  # deepcopy keeps the tie
    assert reference_model[0].A is reference_model[1].A
    x = torch.randn(7, 32, device=device, dtype=dtype)
    model(x).square().sum().backward()
    reference_model(x.to("cpu", torch.float64)).square().sum().backward()
    u = UNIT_ROUNDOFF.get(dtype)
    assert relative_error(model[0].A.grad, reference_model[0].A.grad) <= (20 * u if u else FLOAT32_TOLERANCE)


def test_a_merged_layer_holds_h_on_the_device_and_an_unmerged_one_follows_a_write(device):
    layer = PHMLinear(64, 96, 4).to(device).eval().merge()
    with torch.no_grad():
        weight = layer.current_weight()
        assert layer.current_weight() is weight and weight.device.type == device.type  # built once, on the device
        x = torch.randn(9, 64, device=device)
        torch.testing.assert_close(layer(x), torch.nn.functional.linear(x, layer.build_weight(), layer.bias))
        layer.unmerge().S.add_(0.5)  # an optimizer's in-place step
        assert relative_error(layer.weight, literal_weight(layer)[0].detach()) <= FLOAT32_TOLERANCE


@pytest.mark.parametrize("layout", ["per-gate", "fused"])
def test_hypercomplex_lstm_through_cudnn_matches_the_cpu(device, layout):
    lstm = HypercomplexLSTM(32, 48, num_layers=2, bidirectional=True, linear=LinearSpec("phm", n=4), gate_layout=layout)
    on_device = copy.deepcopy(lstm).to(device)
    x = torch.randn(6, 11, 32)  # (batch, time, features)
    lengths = torch.tensor([11, 9, 7, 4, 2, 1])[torch.randperm(6)]
    packed = nn.utils.rnn.pack_padded_sequence(x, lengths, batch_first=True, enforce_sorted=False)

    outputs = {}
    for name, module, where in (("cpu", lstm, "cpu"), ("device", on_device, device)):
        output, (h, c) = module(packed.to(where))
        padded, _ = nn.utils.rnn.pad_packed_sequence(output, batch_first=True)
        (padded.square().sum() + h.sum() + c.sum()).backward()
        gradients = [p.grad for p in module.parameters()]
        outputs[name] = [padded, h, c, *gradients]
    assert all(t.device.type == device.type for t in outputs["device"])
    for value, expected in zip(outputs["device"], outputs["cpu"]):
        assert relative_error(value, expected.to(torch.float64)) <= 1e-5


def translation_model(arch_flags: list):
    """A tiny translation model of the plugin, built as fairseq-train builds it, on an in-memory dictionary."""
    from fairseq import options
    from fairseq.data import Dictionary
    from fairseq.tasks.translation import TranslationTask

    import phm_fairseq  # noqa: F401

    dictionary = Dictionary()
    for symbol in "abcdefghijklmnopqrstuvwxyz":
        dictionary.add_symbol(symbol)
    sizes = ["--encoder-layers", "1", "--decoder-layers", "1", "--encoder-embed-dim", "32", "--decoder-embed-dim", "32"]
    sizes += ["--encoder-ffn-embed-dim", "64", "--decoder-ffn-embed-dim", "64"]
    sizes += ["--encoder-attention-heads", "2", "--decoder-attention-heads", "2", "--share-all-embeddings"]
    argv = ["DATA", "--task", "translation", "--dropout", "0", *sizes, *arch_flags]
    args = options.parse_args_and_arch(options.get_training_parser(), input_args=argv)
    task = TranslationTask(args, dictionary, dictionary)
    return task.build_model(args), task


def batch(task, device, sentences=4, length=7):
    generator = torch.Generator().manual_seed(1)
    pad, eos, symbols = task.source_dictionary.pad(), task.source_dictionary.eos(), len(task.source_dictionary)
    tokens = torch.randint(task.source_dictionary.nspecial, symbols, (sentences, length), generator=generator)
    tokens[:, -1] = eos
    tokens[1, :2] = pad  # left-padded sources, as fairseq batches them
    lengths = tokens.ne(pad).sum(1)
    targets = torch.randint(task.source_dictionary.nspecial, symbols, (sentences, length - 1), generator=generator)
    previous = torch.cat([torch.full((sentences, 1), eos), targets], dim=1)
    return {
        "src_tokens": tokens.to(device),
        "src_lengths": lengths.to(device),
        "prev_output_tokens": previous.to(device),
    }


MODELS = {
    "PHM n=4": ["--arch", "phm_transformer_demo", "--phm-n", "4"],
    "PHM n=4 rank 2, shared rule": ["--arch", "phm_transformer_demo", "--phm-rank", "2", "--phm-shared-rule", "model"],
    "quaternion + q-attention": ["--arch", "quaternion_transformer_demo", "--quaternion-attention"],
}


@pytest.mark.parametrize("name", list(MODELS))
def test_a_model_moved_with_cuda_and_half_after_it_was_merged(device, name):
    model, task = translation_model(MODELS[name])
    model.make_generation_fast_()  # as fairseq-generate: every PHM layer merges its H on the CPU, in float32
    with torch.no_grad():
        model(**batch(task, "cpu"))
        model.to(device).half()
        net_input = batch(task, device)
        logits, _ = model(**net_input)
    assert logits.device.type == device.type and logits.dtype == torch.float16
    layers = [m for m in model.modules() if isinstance(m, PHMLinear)]
    with torch.no_grad():
        assert all(m.merged and m.weight.device.type == device.type and m.weight.dtype == torch.float16 for m in layers)
    reference_model = copy.deepcopy(model).to("cpu", torch.float64)
    with torch.no_grad():
        expected, _ = reference_model(**batch(task, "cpu"))
    assert relative_error(logits, expected) <= 30 * UNIT_ROUNDOFF[torch.float16]


@pytest.mark.parametrize("product", ["factored", "with H"])
def test_incremental_decoding_on_the_device_equals_the_full_pass(device, product, monkeypatch):
    monkeypatch.setattr(PHMLinear, "factored_max_rows", 10**9 if product == "factored" else 0)
    model, task = translation_model(MODELS["PHM n=4"])
    model.to(device).eval()
    net_input = batch(task, device)
    with torch.no_grad():
        encoder_out = model.encoder(net_input["src_tokens"], src_lengths=net_input["src_lengths"])
        previous = net_input["prev_output_tokens"]
        full, _ = model.decoder(previous, encoder_out=encoder_out)
        state = {}
        steps = [
            model.decoder(previous[:, : t + 1], encoder_out=encoder_out, incremental_state=state)[0][:, -1]
            for t in range(previous.size(1))
        ]
        hypotheses = task.build_generator([model], type("Args", (), {"beam": 3, "lenpen": 0.6})()).generate(
            [model], {"net_input": net_input}
        )
    assert relative_error(torch.stack(steps, dim=1), full.to("cpu", torch.float64)) <= FLOAT32_TOLERANCE
    assert len(hypotheses) == 4 and all(h[0]["tokens"].device.type == device.type for h in hypotheses)
