"""A hypercomplex Transformer set as near as it can be to a trained dense one (phm-compress).

The inverse direction of ``export.densify``. Every PHM or quaternion layer of the target gets
the nearest weights to the dense map it replaces (``modules.fit_phm_layer``); a fused Q/K/V
projection replaces q, k and v stacked. Everything else (embeddings, positions, layer norms,
the output projection, dense layers the target keeps) is copied exactly.
"""

from dataclasses import asdict, dataclass

import torch
from torch import nn

from phm_layers import PHMLinear, QuaternionLinear, fit_phm_layer

from .attention import RowSlice


class CompressionError(ValueError):
    pass


@dataclass(frozen=True)
class CompressedLayer:
    """How near one hypercomplex layer came to the dense map it replaces."""

    name: str
    out_features: int
    in_features: int
    n: int
    kind: str  # "PHM learned", "PHM algebra-init", "PHM algebra-frozen" or "quaternion"
    relative_error: float  # ||W - H||_F / ||W||_F; biases are copied exactly
    squared_norm: float  # ||W||_F^2, to weigh layers in a total

    def as_dict(self) -> dict:
        return asdict(self)


def total_relative_error(layers) -> float:
    """||W - H||_F / ||W||_F over all the layers' weights together."""
    norm = sum(layer.squared_norm for layer in layers)
    discarded = sum(layer.relative_error**2 * layer.squared_norm for layer in layers)
    return (discarded / norm) ** 0.5 if norm > 0 else 0.0


def compress_into(dense: nn.Module, target: nn.Module, progress=iter) -> list:
    """Sets every parameter of ``target`` from the trained ``dense`` model of the same sizes and
    module names; returns a ``CompressedLayer`` per hypercomplex layer, in model order.

    ``progress`` wraps the list of layers (e.g. a tqdm progress bar). Raises CompressionError
    unless the two models correspond one to one: no dense parameter is left out and no
    parameter of ``target`` is left unset (a strict load of the assembled state).
    """
    layers = [(name, m) for name, m in target.named_modules() if isinstance(m, PHMLinear)]
    state, used, report = {}, set(), []
    with torch.no_grad():
        for name, layer in progress(layers):
            weight, bias, keys = _dense_map(dense, name)
            factors = fit_phm_layer(layer, weight, bias)
            state.update({f"{name}.{key}": value for key, value in layer.state_dict().items()})
            used |= keys
            kind = (
                "quaternion"
                if isinstance(layer, QuaternionLinear)
                else f"PHM {layer.rule}" + (f", rank {layer.rank}" if layer.rank is not None else "")
            )
            report.append(
                CompressedLayer(
                    name,
                    layer.out_features,
                    layer.in_features,
                    layer.n,
                    kind,
                    factors.relative_error,
                    float(weight.double().square().sum()),
                )
            )
    state.update({key: value for key, value in dense.state_dict().items() if key not in used})
    expected = set(target.state_dict())
    left_out, unset = [key for key in state if key not in expected], [key for key in expected if key not in state]
    if left_out or unset:
        parts = (
            ("the dense model's", left_out, "would be left out"),
            ("the target's", sorted(unset), "would be left unset"),
        )
        raise CompressionError(
            "the dense model and the target do not correspond one to one: "
            + "; ".join(f"{whose} {_some(keys)} {what}" for whose, keys, what in parts if keys)
        )
    try:
        target.load_state_dict(state, strict=True)
    except RuntimeError as error:  # e.g. parameters of other shapes
        raise CompressionError(f"the dense model does not fit the target: {error}") from None
    return report


def _some(keys, shown=4) -> str:
    more = f" and {len(keys) - shown} more" if len(keys) > shown else ""
    return ", ".join(keys[:shown]) + more


def _dense_map(dense: nn.Module, name: str):
    """(weight, bias, state-dict keys) of the dense linear map that the target's layer ``name``
    replaces; a fused Q/K/V projection replaces q, k and v stacked."""
    parent, _, leaf = name.rpartition(".")
    if leaf == "qkv_proj":
        parts = [_dense_map(dense, f"{parent}.{projection}") for projection in ("q_proj", "k_proj", "v_proj")]
        biases = [bias for _, bias, _ in parts]
        bias = None if any(b is None for b in biases) else torch.cat(biases)
        return torch.cat([weight for weight, _, _ in parts]), bias, set().union(*(keys for *_, keys in parts))
    try:
        layer = dense.get_submodule(name)
    except AttributeError:
        raise CompressionError(f"the dense model has no {name} for the target's layer of that name") from None
    # The dense twin's own fused Q/K/V: its q, k, v are row slices of one nn.Linear.
    owner = f"{parent}.qkv_proj" if isinstance(layer, RowSlice) else name
    if not isinstance(layer, (nn.Linear, RowSlice)):
        raise CompressionError(f"the dense model's {name} is a {type(layer).__name__}, not a linear map")
    keys = {f"{owner}.{key}" for key, _ in dense.get_submodule(owner).named_parameters(recurse=False)}
    return layer.weight.detach(), None if layer.bias is None else layer.bias.detach(), keys
