"""Training a model's parameters by kind: the rules A, the factors S, dense weights, biases, norms.

Plain PyTorch, nothing global:

- **scales by parameter**: a module keeps the learning-rate and weight-decay scales of its own
  parameters in a dict by parameter name (``set_scales``; ``module.training_scales``), not on the
  Parameter objects, so that they survive every way PyTorch makes new Parameters (``copy.deepcopy``,
  ``to_empty`` after a meta-device build, ``load_state_dict(..., assign=True)``, ``.to()``).
  ``param_groups(model, lr, weight_decay)`` turns them into torch's own idiom, optimizer parameter
  groups: one per pair of scales, each with ``lr * lr_scale``, ``weight_decay * weight_decay_scale``
  and the two scales as keys of the group (``torch.optim.AdamW(param_groups(model, lr=1e-3,
  weight_decay=0.01))``; torch's lr schedulers scale each group's own lr, so they keep the ratios).
  An optimizer built from ``model.parameters()`` is left alone: it steps every parameter with its
  one lr (torch.optim.LBFGS, which takes one group, included).

  fairseq is the exception that needs more: ``FairseqOptimizer.set_lr``, which every fairseq lr
  scheduler calls at each update, writes the one lr into every param group, and fairseq's Trainer
  builds its optimizer from a flat list of parameters. ``phm_fairseq.models.training`` therefore
  splits the optimizer that the Trainer builds into these groups once, and has that optimizer's
  ``set_lr`` give each group ``lr * group["lr_scale"]`` (``scaled_set_lr``).
  Unlike a reparameterisation (a constant c in the forward, which under Adam scales a factor's step
  by c), the groups leave the parameters, the checkpoints and gradient clipping as they are, give
  the scale under every optimizer (SGD: not c^2), and can exempt a parameter from weight decay.
- **statistics by kind** (``ParameterStatistics``): per kind, the gradient's norm as the optimizer
  sees it (after fairseq's normalisation and clipping), the parameters' norm, and the relative
  update ||theta_after - theta_before|| / ||theta_before|| of the step, handed to a sink (the fairseq
  models log them through fairseq's metrics). They watch the one optimizer they are attached to,
  through its own step hooks.
"""

import math
from typing import Callable, Dict, List, Optional, Tuple, Union

import torch
from torch import Tensor, nn

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

Scales = Tuple[float, float]
"""(lr_scale, weight_decay_scale)."""


def set_scales(module: nn.Module, name: str, lr_scale: float = 1.0, weight_decay_scale: float = 1.0) -> None:
    """``module``'s own parameter ``name`` is to be stepped with ``lr * lr_scale`` and ``weight_decay *
    weight_decay_scale`` (see the module's docstring); scales of 1 remove the entry. The scales live on
    ``module`` (``module.training_scales``, a plain dict by parameter name), not on the Parameter."""
    scales = module.__dict__.setdefault("training_scales", {})
    if (lr_scale, weight_decay_scale) == (1.0, 1.0):
        scales.pop(name, None)
    else:
        scales[name] = (float(lr_scale), float(weight_decay_scale))


def scales_of(module: nn.Module, name: str) -> Scales:
    """(lr_scale, weight_decay_scale) of ``module``'s own parameter ``name``."""
    return getattr(module, "training_scales", {}).get(name, (1.0, 1.0))


def scales_by_parameter(model: nn.Module) -> Dict[int, Scales]:
    """The scales of ``model``'s parameters other than (1, 1), by ``id`` of the parameter (a shared one:
    the scales of the first module that holds it)."""
    found: Dict[int, Scales] = {}
    seen = set()
    for module in model.modules():
        for name, parameter in module.named_parameters(recurse=False):
            if id(parameter) not in seen:
                seen.add(id(parameter))
                if scales_of(module, name) != (1.0, 1.0):
                    found[id(parameter)] = scales_of(module, name)
    return found


def group_by_scales(parameters: List[Tensor], scales: Dict[int, Scales]) -> Dict[Scales, List[Tensor]]:
    """``parameters`` by their ``scales`` (``scales_by_parameter``; a parameter not in it: (1, 1)), in
    their order, the unscaled first."""
    groups: Dict[Scales, List[Tensor]] = {(1.0, 1.0): []}
    for parameter in parameters:
        groups.setdefault(scales.get(id(parameter), (1.0, 1.0)), []).append(parameter)
    return {key: group for key, group in groups.items() if group}


def param_groups(
    model: nn.Module, lr: Optional[float] = None, weight_decay: Optional[float] = None
) -> List[Dict[str, object]]:
    """Optimizer parameter groups of ``model``'s parameters that require a gradient, by their scales:
    each with ``lr_scale`` and ``weight_decay_scale``, and, where given, ``lr * lr_scale`` and
    ``weight_decay * weight_decay_scale``. For any torch optimizer that takes groups:
    ``torch.optim.AdamW(param_groups(model, lr=1e-3, weight_decay=0.01))``."""
    parameters = [p for p in model.parameters() if p.requires_grad]
    groups = []
    for (lr_scale, decay_scale), members in group_by_scales(parameters, scales_by_parameter(model)).items():
        group: Dict[str, object] = {"params": members, "lr_scale": lr_scale, "weight_decay_scale": decay_scale}
        if lr is not None:
            group["lr"] = lr * lr_scale
        if weight_decay is not None:
            group["weight_decay"] = weight_decay * decay_scale
        groups.append(group)
    return groups


def split_param_groups(optimizer: torch.optim.Optimizer, scales: Dict[int, Scales]) -> bool:
    """Splits ``optimizer``'s one parameter group (built from a flat list of parameters, as fairseq's
    Trainer builds it) into groups by ``scales`` (``scales_by_parameter``), each with the group's lr and
    weight decay times its scales and the scales as ``lr_scale`` and ``weight_decay_scale``, the
    unscaled group first. Before the optimizer's first step. Returns whether it split: an optimizer
    whose parameters have no scales is left as it is."""
    if len(optimizer.param_groups) != 1 or "lr_scale" in optimizer.param_groups[0]:
        raise ValueError(
            f"{type(optimizer).__name__} has {len(optimizer.param_groups)} parameter groups: the scales split "
            f"an optimizer built from one flat list of parameters (as fairseq's Trainer builds it); build the "
            f"groups with parameter_groups.param_groups(model, lr, weight_decay) instead"
        )
    (group,) = optimizer.param_groups
    by_scales = group_by_scales(list(group["params"]), scales)
    if list(by_scales) == [(1.0, 1.0)]:
        return False
    if optimizer.state:
        raise ValueError("the scales split an optimizer's parameter group before its first step, not after")
    optimizer.param_groups = []
    for (lr_scale, decay_scale), parameters in by_scales.items():
        scaled = {**group, "params": parameters, "lr_scale": lr_scale, "weight_decay_scale": decay_scale}
        scaled["lr"] = group["lr"] * lr_scale
        if "weight_decay" in group:
            scaled["weight_decay"] = group["weight_decay"] * decay_scale
        optimizer.add_param_group(scaled)
    return True


def regroup_state_dict(state_dict: dict, flat: List[Tensor], groups: List[dict]) -> dict:
    """A torch optimizer's ``state_dict`` saved with one group of the parameters ``flat`` (in that order),
    as the optimizer of ``groups`` (``split_param_groups``'s, of the same parameters) would have saved it:
    each parameter's state under its new index, each group with the saved hyperparameters times its
    scales. Loads a checkpoint saved before the split (an earlier version's, or one trained without
    scales) into the split optimizer."""
    (saved,) = state_dict["param_groups"]
    old_index = {id(p): i for i, p in enumerate(flat)}
    new_groups, new_state, index = [], {}, 0
    for group in groups:
        indices = []
        for parameter in group["params"]:
            old = saved["params"][old_index[id(parameter)]]
            if old in state_dict["state"]:
                new_state[index] = state_dict["state"][old]
            indices.append(index)
            index += 1
        regrouped = {**saved, "params": indices, "lr_scale": group["lr_scale"]}
        regrouped["weight_decay_scale"] = group["weight_decay_scale"]
        regrouped["lr"] = saved["lr"] * group["lr_scale"]
        if "weight_decay" in saved:
            regrouped["weight_decay"] = saved["weight_decay"] * group["weight_decay_scale"]
        new_groups.append(regrouped)
    return {"state": new_state, "param_groups": new_groups}


def scaled_set_lr(optimizer: torch.optim.Optimizer, lr: Union[float, Tensor]) -> None:
    """What ``FairseqOptimizer.set_lr`` does, one lr for every group of ``optimizer``, but times each
    group's ``lr_scale``."""
    for group in optimizer.param_groups:
        group["lr"] = lr * group.get("lr_scale", 1.0)


# --- statistics by kind --------------------------------------------------------------------------

Sink = Callable[[Dict[str, Tensor]], None]


class ParameterStatistics:
    """Per kind of ``model``'s parameters, at every step of the optimizer it is attached to
    (``attach``): ``gnorm_<kind>`` (the gradient's norm as the optimizer sees it), ``pnorm_<kind>`` (the
    parameters' norm before the step) and ``update_<kind>`` (the step's relative size, ||after -
    before|| / max(||before||, ||after||)), as 0-d tensors handed to ``sink`` (no synchronisation with
    an accelerator). ``close()`` removes its hooks.

    The relative update divides by the larger of the two norms, not by ||before|| alone: the two agree
    to the step's square for the small steps of training, and a kind that starts at zero (PHYDI's
    gates) logs 1 on its first step, not a quotient by zero that would swamp every mean it enters.
    The measure lies in [0, 2].

    Costs, per step: two norms of the parameters and one of the gradients, and one copy of the
    parameters (kept between steps to measure the update)."""

    def __init__(self, model: nn.Module, sink: Sink, optimizer: Optional[torch.optim.Optimizer] = None):
        self.sink = sink
        self.kinds = {kind: [p for _, p in named] for kind, named in parameters_by_kind(model).items()}
        self._stepping: Optional[Dict[str, Tuple[list, list, Tensor, Tensor]]] = None
        self._copies: Dict[int, Tensor] = {}
        self._handles: list = []
        if optimizer is not None:
            self.attach(optimizer)

    def attach(self, optimizer: torch.optim.Optimizer) -> "ParameterStatistics":
        """Measures every step of ``optimizer`` (a torch optimizer: fairseq's wraps one, ``.optimizer``)
        through its own step hooks; returns self."""
        self._handles += [
            optimizer.register_step_pre_hook(lambda optimizer, args, kwargs: self.before_step()),
            optimizer.register_step_post_hook(lambda optimizer, args, kwargs: self.after_step()),
        ]
        return self

    def close(self) -> None:
        for handle in self._handles:
            handle.remove()
        self._handles = []

    @torch.no_grad()
    def before_step(self) -> None:
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
    def after_step(self) -> None:
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
    raise AssertionError(rule)  # lr_scale() admits SCALE_RULES only


def lr_scale(value) -> Union[float, str]:
    """The one check of a learning-rate scale (``--rule-lr-scale``, ``--factor-lr-scale``, the
    LinearSpec fields): a float > 0, or the name of a rule (SCALE_RULES). Raises ValueError (which
    argparse reports as an invalid value of the flag)."""
    if value in SCALE_RULES:
        return value
    scale = None
    if not isinstance(value, bool):
        try:
            scale = float(value)
        except (TypeError, ValueError):
            pass
    if scale is None or not (math.isfinite(scale) and scale > 0):
        raise ValueError(f"{value!r}: expected a number > 0 or one of {', '.join(SCALE_RULES)}")
    return scale
