"""Training a model's parameters by kind: the rules A, the factors S, dense weights, biases, norms.

Two things, both plain PyTorch and both applied around ``optimizer.step()`` by torch.optim's global
step hooks, so that they work with any torch optimizer (fairseq's included) and any lr scheduler:

- **scales by parameter**: a parameter carrying ``optim_overrides = {"optimizer": {"lr_scale": s,
  "weight_decay_scale": w}}`` (fairseq's own convention, which its composite optimizer reads) is
  stepped in a parameter group of its own, with ``lr * s`` and ``weight_decay * w`` of the group it
  belongs to, for the duration of each step. The optimizer's groups are restored right after, so
  its state_dict, checkpoints and the scheduler's ``set_lr`` see the groups they built; the scale
  multiplies whatever lr the scheduler set for the step. Unlike a reparameterisation (a constant
  c in the forward, which under Adam scales a factor's step by c), this leaves the parameters, the
  checkpoints, gradient clipping and every other optimizer (SGD: c^2) as they are.
- **statistics by kind** (``ParameterStatistics``): per kind, the gradient's norm as the optimizer
  sees it (after fairseq's normalisation and clipping), the parameters' norm, and the relative
  update ||theta_after - theta_before|| / ||theta_before|| of the step, handed to a sink (the fairseq
  models log them through fairseq's metrics).
"""

import math
import weakref
from typing import Callable, Dict, List, Optional, Tuple

import torch
from torch import Tensor, nn
from torch.optim.optimizer import register_optimizer_step_post_hook, register_optimizer_step_pre_hook

from .phm_linear import PHMLinear

KINDS = ("rule", "factor", "dense", "bias", "norm", "embedding", "gate", "other")
"""rule: the A of PHM layers; factor: their S (or S_left, S_right); dense: other weight matrices
(nn.Linear, attention's packed projections, PHM layers' unshared U and V, ...); bias; norm: LayerNorm
and the like, and the term gains of PHM layers with normalised factors; embedding: nn.Embedding tables
(tied output projections included); gate: PHYDI's residual gates; other: anything else."""

_PHM_KINDS = {"A": "rule", "S": "factor", "S_left": "factor", "S_right": "factor"}
_PHM_KINDS.update(U="dense", V="dense", term_gain="norm")  # the options of issue 56

_NORMS = (nn.LayerNorm, nn.GroupNorm, nn.modules.batchnorm._NormBase)


def parameter_kind(module: nn.Module, name: str, parameter: Tensor) -> str:
    """The kind of ``module``'s own parameter ``name``."""
    if name == "residual_gate":
        return "gate"
    if isinstance(module, PHMLinear):
        return _PHM_KINDS.get(name, "bias")
    if isinstance(module, _NORMS) or type(module).__name__.endswith("LayerNorm"):
        return "norm"
    if isinstance(module, nn.Embedding):
        return "embedding"
    if name.endswith("bias"):
        return "bias"
    return "dense" if parameter.dim() >= 2 else "other"


def parameters_by_kind(model: nn.Module) -> Dict[str, List[Tuple[str, nn.Parameter]]]:
    """Every parameter of ``model`` (a shared one once, under its first name) by kind, in KINDS order."""
    found: Dict[str, List[Tuple[str, nn.Parameter]]] = {}
    seen = set()
    for module_name, module in model.named_modules():
        for name, parameter in module.named_parameters(recurse=False):
            if id(parameter) in seen:
                continue
            seen.add(id(parameter))
            full_name = f"{module_name}.{name}" if module_name else name
            found.setdefault(parameter_kind(module, name, parameter), []).append((full_name, parameter))
    return {kind: found[kind] for kind in KINDS if kind in found}


# --- scales by parameter ------------------------------------------------------------------------


def set_scales(parameter: nn.Parameter, lr_scale: float = 1.0, weight_decay_scale: float = 1.0) -> None:
    """Marks ``parameter`` to be stepped with ``lr * lr_scale`` and ``weight_decay * weight_decay_scale``
    (see the module's docstring); scales of 1 remove the mark."""
    if lr_scale == 1.0 and weight_decay_scale == 1.0:
        if hasattr(parameter, "optim_overrides"):
            del parameter.optim_overrides
        return
    parameter.optim_overrides = {"optimizer": {"lr_scale": lr_scale, "weight_decay_scale": weight_decay_scale}}
    _install_hooks()


def scales_of(parameter: Tensor) -> Tuple[float, float]:
    """(lr_scale, weight_decay_scale) that ``parameter`` is stepped with."""
    overrides = getattr(parameter, "optim_overrides", None) or {}
    options = overrides.get("optimizer", {})
    return float(options.get("lr_scale", 1.0)), float(options.get("weight_decay_scale", 1.0))


_groups_before_split: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


def _split_groups(optimizer: torch.optim.Optimizer, args, kwargs) -> None:
    _restore_groups(optimizer)  # a step that raised left its split behind
    groups, split = [], False
    for group in optimizer.param_groups:
        by_scales: Dict[Tuple[float, float], list] = {}
        for parameter in group["params"]:
            by_scales.setdefault(scales_of(parameter), []).append(parameter)
        if list(by_scales) in ([], [(1.0, 1.0)]):
            groups.append(group)
            continue
        split = True
        for (lr_scale, decay_scale), parameters in by_scales.items():
            scaled = {**group, "params": parameters, "lr": group["lr"] * lr_scale}
            if "weight_decay" in group:
                scaled["weight_decay"] = group["weight_decay"] * decay_scale
            groups.append(scaled)
    if split:
        _groups_before_split[optimizer] = optimizer.param_groups
        optimizer.param_groups = groups


def _restore_groups(optimizer: torch.optim.Optimizer, *unused) -> None:
    groups = _groups_before_split.pop(optimizer, None)
    if groups is not None:
        optimizer.param_groups = groups


# --- statistics by kind --------------------------------------------------------------------------

Sink = Callable[[Dict[str, Tensor]], None]


class ParameterStatistics:
    """Per kind of ``model``'s parameters, at every optimizer step that updates them: ``gnorm_<kind>``
    (the gradient's norm as the optimizer sees it), ``pnorm_<kind>`` (the parameters' norm before the
    step) and ``update_<kind>`` (the step's relative size, ||after - before|| / max(||before||,
    ||after||)), as 0-d tensors handed to ``sink`` (no synchronisation with an accelerator). Keep a
    reference: the hooks hold this object weakly, and it stops when it is collected or ``close()``d
    (``start()`` again).

    The relative update divides by the larger of the two norms, not by ||before|| alone: the two agree
    to the step's square for the small steps of training, and a kind that starts at zero (PHYDI's
    gates) logs 1 on its first step, not a quotient by zero that would swamp every mean it enters.
    The measure lies in [0, 2].

    Costs, per step: two norms of the parameters and one of the gradients, and one copy of the
    parameters (kept between steps to measure the update)."""

    def __init__(self, model: nn.Module, sink: Sink):
        self.sink = sink
        self.kinds = {kind: [p for _, p in named] for kind, named in parameters_by_kind(model).items()}
        self._ids = {id(p) for parameters in self.kinds.values() for p in parameters}
        self._stepping: Optional[Dict[str, Tuple[list, list, Tensor, Tensor]]] = None
        self._copies: Dict[int, Tensor] = {}
        self._holds: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()
        self.start()

    def start(self) -> None:
        _statistics.add(self)
        _install_hooks()

    def close(self) -> None:
        _statistics.discard(self)

    def _steps_model_of(self, optimizer) -> bool:
        holds = self._holds.get(optimizer)
        if holds is None:  # an optimizer's parameters are fixed once it is built
            groups = _groups_before_split.get(optimizer, optimizer.param_groups)
            holds = any(id(p) in self._ids for group in groups for p in group["params"])
            self._holds[optimizer] = holds
        return holds

    @torch.no_grad()
    def before_step(self, optimizer) -> None:
        self._stepping = None
        if not self._steps_model_of(optimizer):
            return
        stepping = {}
        for kind, parameters in self.kinds.items():
            stepped = [p for p in parameters if p.grad is not None]
            if not stepped:
                continue
            copies = [self._copy_of(p) for p in stepped]
            torch._foreach_copy_(copies, stepped)
            grad_norm = _norm([p.grad for p in stepped])
            stepping[kind] = (stepped, copies, grad_norm, _norm(copies))
        self._stepping = stepping

    @torch.no_grad()
    def after_step(self, optimizer) -> None:
        stepping, self._stepping = self._stepping, None
        if not stepping:
            return
        stats = {}
        for kind, (stepped, copies, grad_norm, param_norm) in stepping.items():
            update = _norm(torch._foreach_sub(stepped, copies))
            larger_norm = torch.maximum(param_norm, _norm(stepped))
            stats[f"gnorm_{kind}"] = grad_norm
            stats[f"pnorm_{kind}"] = param_norm
            stats[f"update_{kind}"] = update / larger_norm.clamp_min(torch.finfo(larger_norm.dtype).tiny)
        self.sink(stats)

    def _copy_of(self, parameter: Tensor) -> Tensor:
        copy = self._copies.get(id(parameter))
        if copy is None or copy.shape != parameter.shape or copy.device != parameter.device:
            copy = self._copies[id(parameter)] = torch.empty_like(parameter, memory_format=torch.preserve_format)
        return copy


def _norm(tensors: List[Tensor]) -> Tensor:
    return torch.linalg.vector_norm(torch.stack([n.float() for n in torch._foreach_norm(tensors)]))


_statistics: "weakref.WeakSet[ParameterStatistics]" = weakref.WeakSet()


def _before_step(optimizer, args, kwargs) -> None:
    for statistics in list(_statistics):
        statistics.before_step(optimizer)
    _split_groups(optimizer, args, kwargs)


def _after_step(optimizer, args, kwargs) -> None:
    _restore_groups(optimizer)
    for statistics in list(_statistics):
        statistics.after_step(optimizer)


_hooks_installed = False


def _install_hooks() -> None:
    """Registers the two global step hooks once per process, when the first parameter is scaled or the
    first statistics are asked for: a process that uses neither is left as it was."""
    global _hooks_installed
    if not _hooks_installed:
        register_optimizer_step_pre_hook(_before_step)
        register_optimizer_step_post_hook(_after_step)
        _hooks_installed = True


# --- the scales that a rule of thumb gives a PHM layer ---------------------------------------------

SCALE_RULES = ("balanced", "mup")
"""balanced: each factor's Adam step, relative to its own initial scale, equals a dense layer's
(lr / rms), so that A and S move H by the same relative amount per step: S keeps the lr, A gets
rms(A) / rms(W) = 1 / (sqrt(n) rms(W)). mup: each factor's lr inversely proportional to its fan-in,
relative to the dense layer's (in_features), as muP prescribes for Adam and Qiu et al. (ICML 2024)
apply to each factor of a structured layer: S_i, which maps in/n features, gets n; A, which mixes n
blocks, in_features / n."""


def factor_scales(layer: PHMLinear, rule: str) -> Dict[str, float]:
    """The lr scale of each factor of ``layer`` (by parameter name) under ``rule`` (SCALE_RULES)."""
    n, fan_in = layer.n, layer.in_features
    dense_rms = layer.gain * math.sqrt(2.0 / max(layer.in_features + layer.out_features, 1))
    if rule == "balanced":
        scales = {"A": 1.0 / (math.sqrt(n) * dense_rms), "S": 1.0}
        if layer.rank is not None:  # each factor's entries have rms sqrt(dense_rms / sqrt(rank))
            scales["S_left"] = scales["S_right"] = math.sqrt(dense_rms / math.sqrt(layer.rank)) / dense_rms
        return scales
    if rule == "mup":
        scales = {"A": fan_in / n, "S": float(n)}
        if layer.rank is not None:  # S_right maps in/n features, S_left maps rank
            scales.update(S_right=float(n), S_left=fan_in / layer.rank)
        return scales
    raise ValueError(f"unknown lr scale rule {rule!r}: choose one of {', '.join(SCALE_RULES)} or give a number")
