"""What the plugin adds to fairseq's Trainer: the lr and weight-decay scales of the PHM factors as
parameter groups, and --log-parameter-stats.

fairseq gives a plugin no place to shape the optimizer that fairseq-train builds: its Trainer builds it
from one flat list of the model's parameters (``Trainer._build_optimizer``), and
``FairseqOptimizer.set_lr``, which every fairseq lr scheduler calls at each update, overwrites the lr of
every param group with the one lr. So, where the model's layers carry scales
(``phm_layers.parameter_groups``), ``prepare_optimizer`` splits the torch optimizer that steps
the model's parameters into groups by scale, once, right after the Trainer has built it (before any
checkpoint's optimizer state is loaded into it, and before its first step), and has the FairseqOptimizer
that owns it set each group's lr times its ``lr_scale``. Each group keeps its scales, so the optimizer's
state_dict (and a checkpoint) holds them and a resumed run goes on as the uninterrupted one; a state
saved with one group (an earlier version's, or a run without scales) is regrouped as it loads. With
--log-parameter-stats, the statistics are attached to that optimizer's own step hooks.

The Trainer's ``_build_optimizer`` is wrapped for this when the plugin is registered with fairseq
(``install``); it does nothing for a model without scales or statistics, and nothing else in the
process changes: no optimizer of the user's own, no model loaded for inference, and no torch-wide
optimizer hook is touched.
"""

import functools
from itertools import chain

from fairseq.logging import metrics
from fairseq.optim import FairseqOptimizer
from fairseq.optim.amp_optimizer import AMPOptimizer
from fairseq.optim.fp16_optimizer import FP16Optimizer, MemoryEfficientFP16Optimizer
from fairseq.trainer import Trainer

from phm_layers.parameter_groups import (
    ParameterStatistics,
    regroup_state_dict,
    scaled_set_lr,
    scales_by_parameter,
    split_param_groups,
)


def prepare_optimizer(optimizer: FairseqOptimizer, model, criterion=None, log_parameter_stats=False) -> None:
    """Splits the torch optimizer inside fairseq's ``optimizer`` (built by fairseq's Trainer from the
    parameters of ``model`` and ``criterion`` that require a gradient) by the scales of ``model``'s
    layers, and attaches --log-parameter-stats to it. See the module's docstring."""
    scales = scales_by_parameter(model)
    if not scales and not log_parameter_stats:
        return
    inner = _stepping_optimizer(optimizer)
    flat = [p for p in chain(model.parameters(), criterion.parameters() if criterion else ()) if p.requires_grad]
    if isinstance(optimizer, FP16Optimizer):  # steps fp32 copies of the parameters, in their order
        if optimizer.has_flat_params or log_parameter_stats:
            raise ValueError(
                "fairseq's FP16Optimizer steps fp32 copies of the parameters (one flat copy, unless "
                "--fp16-no-flatten-grads), not the model's own: train with --memory-efficient-fp16 or --amp"
            )
        scales = {id(copy): scales[id(p)] for p, copy in zip(flat, optimizer.fp32_params) if id(p) in scales}
        flat = list(optimizer.fp32_params)
    torch_optimizer = inner.optimizer
    if split_param_groups(torch_optimizer, scales):
        inner.set_lr = functools.partial(scaled_set_lr, torch_optimizer)
        groups = [dict(group) for group in torch_optimizer.param_groups]  # as split, for the hook below
        torch_optimizer.register_load_state_dict_pre_hook(functools.partial(_regroup_one_group, flat, groups))
    if log_parameter_stats:
        ParameterStatistics(model, log_parameter_statistics, torch_optimizer)


def _stepping_optimizer(optimizer: FairseqOptimizer) -> FairseqOptimizer:
    """The FairseqOptimizer whose torch optimizer steps the parameters: fairseq's half-precision and amp
    optimizers wrap one."""
    if isinstance(optimizer, MemoryEfficientFP16Optimizer):
        return optimizer.wrapped_optimizer
    if isinstance(optimizer, (FP16Optimizer, AMPOptimizer)):
        return optimizer.fp32_optimizer
    return optimizer


def _regroup_one_group(flat, groups, torch_optimizer, state_dict):
    saved = state_dict["param_groups"]
    if len(saved) == 1 and len(groups) > 1 and len(saved[0]["params"]) == len(flat):
        return regroup_state_dict(state_dict, flat, groups)
    return None


def log_parameter_statistics(statistics: dict) -> None:
    """Into fairseq's metrics, as it logs gnorm: averaged over the log interval and the epoch."""
    for key, value in statistics.items():
        metrics.log_scalar(key, value, priority=1000)


def install() -> None:
    """Wraps ``Trainer._build_optimizer`` with ``prepare_optimizer`` (once)."""
    build = Trainer._build_optimizer
    if getattr(build, "prepares_phm_optimizer", False):
        return

    @functools.wraps(build)
    def build_optimizer(trainer: Trainer) -> None:
        build(trainer)
        log_stats = bool(getattr(trainer.cfg.model, "log_parameter_stats", False))
        prepare_optimizer(trainer._optimizer, trainer.get_model(), trainer.get_criterion(), log_stats)

    build_optimizer.prepares_phm_optimizer = True
    Trainer._build_optimizer = build_optimizer
