from torch import nn

from phm_fairseq.modules import LinearSpec, count_parameters


class Tiny(nn.Module):
    def __init__(self, spec):
        super().__init__()
        self.embed_tokens = nn.Embedding(100, 16)
        self.fc1 = spec.build(16, 64)
        self.fc2 = spec.build(64, 16, bias=False)
        self.norm = nn.LayerNorm(16)
        self.output_projection = nn.Linear(16, 100, bias=False)
        self.output_projection.weight = self.embed_tokens.weight  # tied, counted once


def test_counts_with_and_without_embeddings_and_against_dense():
    dense, phm = count_parameters(Tiny(LinearSpec())), count_parameters(Tiny(LinearSpec("phm", n=4)))
    linear = 16 * 64 + 64 + 64 * 16
    assert dense.total == 1600 + linear + 32 and dense.embeddings == 1600
    assert dense.dense_total == dense.total and dense.without_embeddings == linear + 32
    assert phm.without_embeddings == (16 * 64 // 4 + 64 + 64) + (64 * 16 // 4 + 64) + 32
    assert phm.dense_total == dense.total and phm.dense_without_embeddings == linear + 32
    assert phm.as_dict()["without_embeddings"] == phm.without_embeddings


def test_frozen_parameters_are_counted_but_not_trainable():
    model = Tiny(LinearSpec("quaternion"))
    model.embed_tokens.weight.requires_grad_(False)
    counts = count_parameters(model)
    assert counts.trainable == counts.total - 1600
    assert counts.without_embeddings == (16 * 64 // 4 + 64) + (64 * 16 // 4) + 32


def test_a_parameter_registered_on_a_layer_besides_its_own_stays_in_the_dense_count():
    """PHYDI's residual_gate sits on fc2 (phm_fairseq.models.transformer.gate_residual_branch): the dense model
    has it too, so the dense count keeps it; only the factors and the bias give way to the nn.Linear."""
    from phm_fairseq.models.transformer import gate_residual_branch

    dense_model, phm_model = Tiny(LinearSpec()), Tiny(LinearSpec("phm", n=4, lowrank=2, factor_norm=True))
    for model in (dense_model, phm_model):
        gate_residual_branch(model.fc2)
    dense, phm = count_parameters(dense_model), count_parameters(phm_model)
    assert dense.total == 1600 + 16 * 64 + 64 + 64 * 16 + 32 + 1
    assert phm.dense_total == dense.total and phm.dense_without_embeddings == dense.without_embeddings
