"""The dense equivalent of a trained model, for deployment, TorchScript or stock fairseq."""

from fairseq.modules import MultiheadAttention
from torch import nn

from ..modules import PHMLinear
from .attention import HypercomplexMultiheadAttention


def _linear_like(weight, bias) -> nn.Linear:
    layer = nn.Linear(weight.shape[1], weight.shape[0], bias=bias is not None, device=weight.device, dtype=weight.dtype)
    layer.weight.data.copy_(weight.detach())
    if bias is not None:
        layer.bias.data.copy_(bias.detach())
    return layer


def densify(model: nn.Module) -> nn.Module:
    """Replaces, in place, every PHM or quaternion layer by the ``nn.Linear`` it computes and
    every fused Q/K/V projection by three; returns ``model``, which computes the same function.

    Inference needs no H to be built afterwards, and the model's parameters have the names and
    shapes of fairseq's own Transformer. A bare PHM or quaternion layer has no parent to be replaced
    in: its ``to_dense()`` is returned instead.
    """
    if isinstance(model, PHMLinear):
        return model.to_dense()
    for module in list(model.modules()):
        if isinstance(module, HypercomplexMultiheadAttention) and hasattr(module, "qkv_proj"):
            for name in ("q_proj", "k_proj", "v_proj"):
                rows = getattr(module, name)
                setattr(module, name, _linear_like(rows.weight, rows.bias))
            del module.qkv_proj, module._qkv
        for name, child in list(module.named_children()):
            if isinstance(child, PHMLinear):
                setattr(module, name, child.to_dense())
    for module in model.modules():
        if type(module) is HypercomplexMultiheadAttention:
            # With nn.Linear projections nothing but construction told it apart from fairseq's
            # own attention, whose forward TorchScript compiles only on that class itself.
            module.__class__ = MultiheadAttention
    return model
