"""torch.compile of the layers (dynamic shapes, no graph break), of HypercomplexLSTM, and of a whole PHM
Transformer's forward and backward: the eager outputs and gradients, in training and in eval mode.

The graphs go to AOTAutograd's forward and backward graphs run eagerly ("aot_eager": TorchDynamo's capture,
dynamic shapes, the backward graph), which takes seconds here; inductor's generated code, which takes
minutes per model on two cores, runs for one layer here and for whole models in benchmarks/bench_compile.py."""

import copy
from pathlib import Path

import pytest
import torch
from fixtures.make_checkpoints import CHECKPOINTS, build_model
from torch._dynamo.backends.registry import lookup_backend

from phm_fairseq.modules import HypercomplexLSTM, LinearSpec, PHMLinear, QuaternionLinear

# TorchDynamo's tracing takes about 20 CPU seconds over the module: a fifth of make test-fast's, so that loop
# leaves it out and make test runs it
pytestmark = pytest.mark.slow

DATA = Path(__file__).resolve().parent / "fixtures" / "checkpoints" / "data"


class Graphs:
    """A torch.compile backend that counts the graphs it is given and hands them on to ``backend``: a
    test whose function fell back to eager (a recompilation limit, a skipped frame) compiles none."""

    def __init__(self, backend="aot_eager"):
        self.backend, self.count, self.ops = lookup_backend(backend), 0, []

    def __call__(self, graph, example_inputs):
        self.count += 1
        self.ops += [str(node.target) for node in graph.graph.nodes if node.op == "call_function"]
        return self.backend(graph, example_inputs)


@pytest.fixture(autouse=True)
def fresh_dynamo():
    torch._dynamo.reset()
    torch.manual_seed(0)
    yield
    torch._dynamo.reset()


def shared_rule_pair():
    spec = LinearSpec("phm", n=4, shared_rule="model")
    return spec.finish_model(torch.nn.Sequential(spec.build(64, 128), torch.nn.ReLU(), spec.build(128, 64)))


LAYERS = {
    "phm": lambda: PHMLinear(64, 128, n=4),
    "low rank": lambda: PHMLinear(64, 128, n=4, rank=2),
    "quaternion": lambda: QuaternionLinear(64, 128),
    "shared rule": shared_rule_pair,
    "low-rank term": lambda: PHMLinear(64, 128, n=4, lowrank=4),
    "factor norm": lambda: PHMLinear(64, 128, n=4, rank=2, factor_norm=True),
}


def assert_same_gradients(compiled, eager):
    for (name, p), q in zip(compiled.named_parameters(), eager.parameters()):
        torch.testing.assert_close(p.grad, q.grad, msg=name)


@pytest.mark.parametrize(
    "kind,mode", [(kind, mode) for kind in LAYERS for mode in ("train", "eval")] + [("phm", "merged")]
)
def test_a_layer_compiles_whole_with_dynamic_shapes_to_the_eager_function(kind, mode):
    layer = LAYERS[kind]().train(mode == "train")
    eager = copy.deepcopy(layer)
    for module in (*layer.modules(), *eager.modules()):
        if isinstance(module, PHMLinear):
            module.factored_max_rows = 8  # both products: up to 8 rows factored, H beyond
            if mode == "merged":
                module.merge()
    graphs = Graphs()
    compiled = torch.compile(layer, backend=graphs, fullgraph=True, dynamic=True)
    for rows in (50, 20, 37, 3, 5):
        x = torch.randn(rows, 64)
        with torch.set_grad_enabled(mode == "train"):
            out, expected = compiled(x), eager(x)
            torch.testing.assert_close(out, expected)
            if mode == "train":
                out.square().sum().backward()
                expected.square().sum().backward()
                assert_same_gradients(layer, eager)
    assert graphs.count == 2, "one graph per product, whatever the number of rows"


def test_a_layer_compiles_with_inductor():
    layer = PHMLinear(64, 128, n=4)
    compiled = torch.compile(layer, fullgraph=True, dynamic=True)
    for rows in (50, 20):
        x = torch.randn(rows, 64)
        torch.testing.assert_close(compiled(x), layer(x))


def test_the_lstm_compiles_its_gate_maps_and_runs_the_fused_op_eagerly():
    lstm = HypercomplexLSTM(16, 16, LinearSpec("phm", n=4), bidirectional=True, gate_layout="fused")
    eager = copy.deepcopy(lstm)
    graphs = Graphs()
    compiled = torch.compile(lstm, backend=graphs, dynamic=True)
    for length in (7, 4):
        x = torch.randn(length, 3, 16)
        (out, (h, c)), (expected, (h_expected, c_expected)) = compiled(x), eager(x)
        torch.testing.assert_close(out, expected)
        torch.testing.assert_close(h, h_expected)
        (out.square().sum() + c.sum()).backward()
        (expected.square().sum() + c_expected.sum()).backward()
        assert_same_gradients(lstm, eager)
    assert graphs.count >= 1, "the gate maps were compiled"
    # inductor cannot lower the fused op (aten.mkldnn_rnn_layer): no graph may hold it, as none holds nn.LSTM's
    assert not [op for op in graphs.ops if "lstm" in op or "rnn" in op], graphs.ops


@pytest.fixture
def transformer():
    """A tiny PHM Transformer (fused Q/K/V, n=4) without dropout, and its compiled self."""
    data, arguments = CHECKPOINTS["phm_fused"]
    no_dropout = ["--dropout", "0", "--attention-dropout", "0", "--activation-dropout", "0"]
    model = build_model(DATA / data, [*arguments, *no_dropout])
    graphs = Graphs()
    return model, torch.compile(copy.deepcopy(model), backend=graphs, dynamic=True), graphs


def batch(size, source_length, target_length):
    tokens = lambda length: torch.randint(4, 12, (size, length))  # noqa: E731  (the fixtures' words)
    return tokens(source_length), torch.full((size,), source_length), tokens(target_length)


def test_a_phm_transformer_compiles_to_the_eager_forward_and_backward(transformer):
    eager, compiled, graphs = transformer
    for shape in ((3, 6, 5), (2, 9, 7)):  # another batch size, source and target length
        inputs = batch(*shape)
        out, expected = compiled(*inputs)[0], eager(*inputs)[0]
        torch.testing.assert_close(out, expected, rtol=1e-4, atol=1e-5)
        out.logsumexp(-1).sum().backward()
        expected.logsumexp(-1).sum().backward()
    for (name, p), q in zip(compiled.named_parameters(), eager.parameters()):
        torch.testing.assert_close(p.grad, q.grad, rtol=1e-4, atol=1e-5, msg=name)
    assert graphs.count >= 1
