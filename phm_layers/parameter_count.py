"""Parameter counts with and without embeddings, against the same model with dense layers."""

from dataclasses import dataclass

from torch import nn

from .phm_linear import PHMLinear


@dataclass(frozen=True)
class ParameterCount:
    total: int
    trainable: int
    embeddings: int
    dense_total: int
    """The same model with every hypercomplex layer replaced by the nn.Linear it stands for."""

    @property
    def without_embeddings(self) -> int:
        return self.total - self.embeddings

    @property
    def dense_without_embeddings(self) -> int:
        return self.dense_total - self.embeddings

    def as_dict(self) -> dict:
        """The counts and the two derived from them, as phm-params --json, phm-compress's and
        phm-export's reports and phm-run's result.json write them (a subclass adds its own fields)."""
        return {
            "total": self.total,
            "trainable": self.trainable,
            "embeddings": self.embeddings,
            "dense_total": self.dense_total,
            "without_embeddings": self.without_embeddings,
            "dense_without_embeddings": self.dense_without_embeddings,
        }


def is_embedding(name: str, module: nn.Module) -> bool:
    # fairseq names the decoder's vocabulary projection "output_projection"; tied to the
    # input embedding it is counted once (parameters are deduplicated by identity).
    return isinstance(module, nn.Embedding) or name.split(".")[-1] == "output_projection"


def count_parameters(model: nn.Module) -> ParameterCount:
    params = {id(p): p for p in model.parameters()}
    embeddings = {
        id(p) for name, module in model.named_modules() if is_embedding(name, module) for p in module.parameters()
    }
    hypercomplex = [m for m in model.modules() if isinstance(m, PHMLinear)]
    # what the nn.Linear replaces: the tensors H is built from, and the bias. A parameter that something
    # else registers on the layer (PHYDI's residual_gate on fc2) stays, as it does on a dense layer.
    compressed = {id(t) for m in hypercomplex for t in (*m.factor_tensors(), m.bias) if isinstance(t, nn.Parameter)}
    total = sum(p.numel() for p in params.values())
    return ParameterCount(
        total=total,
        trainable=sum(p.numel() for p in params.values() if p.requires_grad),
        embeddings=sum(params[i].numel() for i in embeddings),
        dense_total=total
        - sum(params[i].numel() for i in compressed)
        + sum(m.dense_parameter_count for m in hypercomplex),
    )
