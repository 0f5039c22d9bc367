"""Modules whose ``weight`` is computed from other parameters (PHMLinear's H = sum_i A_i kron S_i).

PyTorch's own idiom for such a weight, as ``torch.nn.utils.parametrize`` registers it: ``weight`` is a
property computed from the parameters when read, and each read gives a new tensor, the caller's own (a
write into it changes that tensor only, never the module). ``layer.weight = W`` has no inverse that keeps
W exactly (parametrize's ``right_inverse``): it raises an error that names the call that sets the layer
nearest to W (``fit_phm_layer``).

Nothing is cached behind the user's back, so no weight can be stale. For inference, ``merge()`` builds
the weight once and keeps it, explicitly, as PEFT merges an adapter (a plain merged state: ``merged``,
``merge()``, ``unmerge()``); fairseq asks for it through ``make_generation_fast_`` where it prepares a
model for inference (fairseq-generate, fairseq-interactive, the hub interface).
"""

import weakref
from typing import Dict, Optional, Tuple

import torch
from torch import Tensor, nn

# One entry per call of nn.Module._apply (keyed by its function, which lives as long as the call): the
# Parameters that a move replaced by new ones, so that a Parameter shared by several modules (a tied rule)
# is replaced by one new Parameter in all of them, as copy.deepcopy keeps it shared. nn.Module._apply
# replaces a Parameter module by module where it cannot swap its data in place (to_empty() from the meta
# device), which would untie it.
_MOVED: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()
# The same for load_state_dict(assign=True), which assigns each module the checkpoint's tensor as a new
# Parameter: id of the replaced Parameter -> (a weak reference to it, one to its replacement).
_ASSIGNED: Dict[int, Tuple["weakref.ref", "weakref.ref"]] = {}


def _same_tensors(a: Tuple[Tensor, ...], b: Tuple[Tensor, ...]) -> bool:
    return len(a) == len(b) and all(x is y for x, y in zip(a, b))


class DerivedWeight(nn.Module):
    """Base of modules whose ``weight`` is ``build_weight()``, built from ``factor_tensors()``.

    ``weight`` is computed when read: H built now from the factors (differentiable in them), or, while
    the module is merged, a copy of the merged H. ``merge()`` builds H once, for inference, and the
    module computes with that one until ``unmerge()`` or ``train()``. What changes the factors through
    the module merges again: ``load_state_dict``, moves (``.to()``, ``.half()``, ``to_empty()``) and the
    subclasses' ``reset_parameters()`` (``merge_again()``). A factor replaced by another tensor
    (``module.S = ...``, or ``torch.func.functional_call``'s) is used at once: H is built from it at every
    forward until ``merge()``. An in-place write into a factor is not seen by a merged module until
    ``merge()`` or ``unmerge()``. A merged H is a constant: a forward that would need gradients for the
    tensors it was built from raises an error, so no optimizer can change them behind it.
    """

    def __init__(self) -> None:
        super().__init__()
        self._merged_weight: Optional[Tensor] = None
        self._merged_from: Tuple[Tensor, ...] = ()  # the tensors the merged weight was built from
        self.register_load_state_dict_post_hook(_merge_again)

    def build_weight(self) -> Tensor:
        raise NotImplementedError

    def factor_tensors(self) -> Tuple[Tensor, ...]:
        """Every tensor that the weight is built from."""
        raise NotImplementedError

    def weight_refusal(self) -> str:
        """What ``module.weight = ...`` is told."""
        return (
            f"{type(self).__name__}.weight is computed from the module's other tensors when read and cannot be "
            f"assigned; change those tensors instead (load_state_dict(), reset_parameters(), or in place)"
        )

    @property
    def weight(self) -> Tensor:
        """H: built now from the factors, differentiable in them; while merged, a copy of the merged H
        (and, where gradients are on for the factors, H built now, so that they get them). Each read is a
        new tensor: a write into it changes the caller's tensor only."""
        if self._merged_weight is not None and self._merged_is_current() and not self._needs_factor_gradients():
            return self._merged_weight.clone()
        return self.build_weight()

    def current_weight(self) -> Tensor:
        """The weight the module computes with: the merged one itself while merged, else built now."""
        if self._merged_weight is not None and self._merged_is_current():
            if self._needs_factor_gradients():
                raise RuntimeError(
                    f"{type(self).__name__} is merged for inference (merge(), or fairseq's make_generation_fast_): "
                    f"its weight was built once, and no gradient reaches the tensors it was built from; call "
                    f"unmerge() (or train()) first, or compute under torch.no_grad()"
                )
            return self._merged_weight
        return self.build_weight()

    def _merged_is_current(self) -> bool:
        # not while torch.func.functional_call has put other tensors in place of the module's own
        return _same_tensors(self._merged_from, self.factor_tensors())

    def _needs_factor_gradients(self) -> bool:
        return torch.is_grad_enabled() and any(t.requires_grad for t in self._merged_from)

    @property
    def merged(self) -> bool:
        return self._merged_weight is not None

    def merge(self):
        """Builds the weight once and computes with it until ``unmerge()`` or ``train()``; returns self."""
        with torch.no_grad():
            weight = self.build_weight()
        self._merged_weight, self._merged_from = weight, self.factor_tensors()
        return self

    def unmerge(self):
        """Drops the merged weight: the module builds it at every forward again, differentiable; returns
        self."""
        self._merged_weight, self._merged_from = None, ()
        return self

    def merge_again(self) -> None:
        """Merges the factors as they are now if the module is merged (after a write into them)."""
        if self.merged:
            self.merge()

    def make_generation_fast_(self, **kwargs) -> None:
        """fairseq's hook, called where it prepares a model for inference (``prepare_for_inference_``)."""
        self.merge()

    def train(self, mode: bool = True):
        if mode:
            self.unmerge()
        return super().train(mode)

    def _apply(self, fn, recurse=True):
        merged = self.merged
        self.unmerge()
        before = dict(self._parameters)
        module = super()._apply(fn, recurse)
        self._keep_shared_parameters(fn, before)
        if merged:  # on the moved tensors (to_empty(): uninitialised until loaded or reset, which merge again)
            self.merge()
        return module

    def _keep_shared_parameters(self, fn, before: Dict[str, Optional[Tensor]]) -> None:
        """A Parameter that ``fn`` replaced here and already replaced in another module in the same call
        (a rule shared by several layers) becomes the other module's new Parameter: one, still shared."""
        try:
            moved = _MOVED.setdefault(fn, {})
        except TypeError:  # a function that takes no weak reference
            return
        for name, old in before.items():
            new = self._parameters.get(name)
            if old is None or new is None or new is old:
                continue
            earlier = moved.get(id(old))
            if earlier is not None and earlier[0]() is old:
                self._parameters[name] = earlier[1]
            else:
                moved[id(old)] = (weakref.ref(old), new)

    def _load_from_state_dict(self, *args, **kwargs):
        before = dict(self._parameters)
        super()._load_from_state_dict(*args, **kwargs)
        self._keep_shared_assignments(before)

    def _keep_shared_assignments(self, before: Dict[str, Optional[Tensor]]) -> None:
        """After ``load_state_dict(assign=True)``: a Parameter shared with a module loaded before (a rule
        shared by several layers), whose checkpoint tensors are one tensor (the same memory), stays shared:
        this module takes the other's new Parameter rather than one of its own."""
        for name, old in before.items():
            new = self._parameters.get(name)
            if old is None or new is None or new is old:
                continue
            earlier = _ASSIGNED.get(id(old))
            other = earlier[1]() if earlier is not None and earlier[0]() is old else None
            if other is not None and _same_memory(other, new):
                self._parameters[name] = other
            else:
                key = id(old)
                _ASSIGNED[key] = (weakref.ref(old, lambda _, key=key: _ASSIGNED.pop(key, None)), weakref.ref(new))

    def __setattr__(self, name, value):
        if name == "weight":
            raise AttributeError(self.weight_refusal())
        super().__setattr__(name, value)


def _same_memory(a: Tensor, b: Tensor) -> bool:
    return (
        a.device == b.device
        and a.device.type != "meta"
        and a.dtype == b.dtype
        and a.shape == b.shape
        and a.stride() == b.stride()
        and a.data_ptr() == b.data_ptr()
    )


def _merge_again(module: DerivedWeight, incompatible_keys) -> None:
    """After ``load_state_dict``: a merged module merges the loaded tensors."""
    module.merge_again()
