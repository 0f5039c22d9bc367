"""--phydi: PHYDI's residual gates (Mancanelli et al., MLSP 2023), every layer the identity at the start."""

import copy

import pytest
import torch
from test_parameter_groups import fairseq_model

from phm_fairseq.modules.parameter_groups import parameters_by_kind


@pytest.mark.parametrize("arch", ["phm_transformer_demo", "quaternion_transformer_demo", "transformer_twin_demo"])
def test_every_residual_branch_starts_closed_so_that_each_layer_starts_as_its_norm(arch):
    _, _, model = fairseq_model("--arch", arch, "--phydi", "--dropout", "0")
    gates = dict(parameters_by_kind(model))["gate"]
    # per encoder layer: self-attention and feed-forward; per decoder layer: the encoder attention too
    assert sorted(name.split(".", 3)[3] for name, _ in gates) == sorted(
        ["self_attn.residual_gate", "fc2.residual_gate"] * 2 + ["encoder_attn.residual_gate"]
    )
    assert all(gate.item() == 0 for _, gate in gates)
    layer = model.encoder.layers[0].eval()
    x = torch.randn(5, 3, 32)
    padding = torch.zeros(3, 5, dtype=torch.bool)
    with torch.no_grad():  # post-norm: LN(x + 0) after each branch
        expected = layer.final_layer_norm(layer.self_attn_layer_norm(x))
        torch.testing.assert_close(layer(x, padding), expected)


def test_the_gates_learn_and_fold_into_the_dense_export():
    from fairseq.models.transformer import TransformerModel

    from phm_fairseq.models.export import densify, stock_transformer_args

    args, task, model = fairseq_model("--arch", "phm_transformer_demo", "--phm-n", "4", "--phydi", "--dropout", "0")
    tokens = torch.randint(4, len(task.source_dictionary), (2, 6))
    batch = {"src_tokens": tokens, "src_lengths": torch.full((2,), 6), "prev_output_tokens": tokens}
    gates = {name: p for name, p in model.named_parameters() if name.endswith("residual_gate")}
    model(**batch)[0].sum().backward()
    # closed, yet learning: the decoder's gates at once; the encoder's once the decoder's encoder attention
    # opens (as in PHYDI's own Transformer, whose decoder gates its encoder attention too)
    assert all((gate.grad.abs() > 0) == name.startswith("decoder.") for name, gate in gates.items())
    with torch.no_grad():
        gates["decoder.layers.0.encoder_attn.residual_gate"].fill_(0.5)
    model.zero_grad()
    model(**batch)[0].sum().backward()
    assert all(gate.grad.abs() > 0 for gate in gates.values())
    gates = list(gates.values())
    with torch.no_grad():
        for gate in gates:
            gate.uniform_(0.2, 1.5)
    model.eval()
    stock = TransformerModel.build_model(stock_transformer_args(args), task).eval()
    stock.load_state_dict(densify(copy.deepcopy(model)).state_dict(), strict=True)
    with torch.no_grad():
        torch.testing.assert_close(stock(**batch)[0], model(**batch)[0], rtol=1e-5, atol=1e-5)
    assert "residual_gate" not in str(densify(copy.deepcopy(model)).state_dict().keys())
