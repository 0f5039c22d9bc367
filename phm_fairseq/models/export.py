"""The dense equivalent of a trained model, for deployment, TorchScript or stock fairseq."""

import argparse

import torch
from fairseq.modules import MultiheadAttention
from torch import nn

from phm_layers import PHMLinear

from .attention import HypercomplexMultiheadAttention
from .transformer import add_hypercomplex_args, remove_residual_gate


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
    in: its ``to_dense()`` is returned instead. PHYDI's residual gates (--phydi) are folded into the
    maps whose output they scale: the attention's output projection, the second feed-forward map.
    """
    if isinstance(model, PHMLinear):
        return model.to_dense()
    gated = [
        (parent, name, remove_residual_gate(child))
        for parent in list(model.modules())
        for name, child in list(parent.named_children())
        if hasattr(child, "residual_gate")
    ]
    for module in list(model.modules()):
        if isinstance(module, HypercomplexMultiheadAttention) and hasattr(module, "qkv_proj"):
            for name in ("q_proj", "k_proj", "v_proj"):
                rows = getattr(module, name)
                setattr(module, name, _linear_like(rows.weight, rows.bias))
            del module.qkv_proj, module._qkv
        for name, child in list(module.named_children()):
            if isinstance(child, PHMLinear):
                setattr(module, name, child.to_dense())
    for parent, name, gate in gated:
        branch = getattr(parent, name)  # fc2: now its dense equivalent
        target = branch.out_proj if isinstance(branch, MultiheadAttention) else branch
        with torch.no_grad():
            target.weight.mul_(gate)
            if target.bias is not None:
                target.bias.mul_(gate)
    for module in model.modules():
        if type(module) is HypercomplexMultiheadAttention:
            # With nn.Linear projections nothing but construction told it apart from fairseq's
            # own attention, whose forward TorchScript compiles only on that class itself.
            module.__class__ = MultiheadAttention
    return model


QUATERNION_ATTENTION_REFUSAL = (
    "Tay et al.'s quaternion attention (--quaternion-attention: four softmaxes over Hamilton-product "
    "logits, each weighting its own component of V) has no counterpart in fairseq's transformer, whose "
    "heads take one softmax over dot products: such a model runs only with the plugin. Quaternion "
    "models without it export"
)


def plugin_model_flags() -> set:
    """The attributes that the plugin's Transformer flags (add_hypercomplex_args) set on model arguments."""
    parser = argparse.ArgumentParser(add_help=False)
    add_hypercomplex_args(parser)
    return set(vars(parser.parse_args([])))


def stock_transformer_args(model_args) -> argparse.Namespace:
    """The arguments of fairseq's own ``transformer`` that computes what ``densify`` makes of a
    ``hypercomplex_transformer`` built from ``model_args``: the same sizes and options, without the
    plugin's flags and user dir. Raises ValueError for a model that has no such counterpart."""
    if getattr(model_args, "quaternion_attention", False):
        raise ValueError(QUATERNION_ATTENTION_REFUSAL)
    ours = plugin_model_flags()
    args = argparse.Namespace(**{key: value for key, value in vars(model_args).items() if key not in ours})
    args.arch = args._name = "transformer"  # every size and option is explicit: the arch adds no defaults
    args.user_dir = None
    return args
