"""Modules whose ``weight`` is derived from other parameters (PHMLinear's H = sum_i A_i kron S_i).

Such a weight is built from the parameters when it is read, so a write into it could only be lost:
every write raises an error that says how to change the module instead, in training and in eval
mode alike (``ReadOnlyWeight``).

Nothing is cached behind the user's back, so no weight can be stale. For inference, ``merge()``
builds the weight once and keeps it, explicitly, as PEFT merges an adapter; fairseq asks for it
through ``make_generation_fast_`` where it prepares a model for inference (fairseq-generate,
fairseq-interactive, the hub interface).
"""

from typing import Optional, Sequence, Tuple

import torch
from torch import Tensor, nn
from torch._C._functorch import is_functorch_wrapped_tensor

# Python's operators that write into their left operand; PyTorch's in-place methods end in "_"
_WRITING_OPERATORS = {
    "__setitem__",
    "__iadd__",
    "__isub__",
    "__imul__",
    "__imatmul__",
    "__itruediv__",
    "__ifloordiv__",
    "__imod__",
    "__ipow__",
    "__iand__",
    "__ior__",
    "__ixor__",
    "__ilshift__",
    "__irshift__",
}


def _writes(func, kwargs) -> bool:
    """Whether ``func`` writes into its first argument, or into ``out=``."""
    name = getattr(func, "__name__", "")
    return (
        "out" in kwargs
        or name in _WRITING_OPERATORS
        or func == Tensor.data.__set__
        or (name.endswith("_") and not name.endswith("__") and name != "requires_grad_")
    )


class ReadOnlyWeight(Tensor):
    """A derived weight as its module hands it out: it computes as any tensor does, and a write into
    it, its ``.data``, ``detach()`` or any other view of it raises ``RuntimeError(refusal)``."""

    refusal: str

    @staticmethod
    def of(weight: Tensor, refusal: str) -> Tensor:
        if type(weight) is not Tensor or is_functorch_wrapped_tensor(weight):
            return weight  # fake tensors, torch.func's wrappers and other subclasses pass as they are
        read_only = weight.as_subclass(ReadOnlyWeight)
        read_only.refusal = refusal
        return read_only

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        source = args[0] if args else None
        target = kwargs.get("out", source)
        if isinstance(target, cls) and _writes(func, kwargs):
            raise RuntimeError(target.refusal)
        with torch._C.DisableTorchFunctionSubclass():
            result = func(*args, **kwargs)
            if isinstance(source, cls):
                result = _aliases_read_only(result, source)
        return result  # anything computed from the weight is an ordinary tensor


def _aliases_read_only(result, source: "ReadOnlyWeight"):
    """``result`` with every tensor that shares ``source``'s memory (a view, an alias) read-only."""
    if isinstance(result, (tuple, list)):
        return type(result)(_aliases_read_only(r, source) for r in result)
    if isinstance(result, Tensor) and torch._C._is_alias_of(result, source):
        return ReadOnlyWeight.of(result.as_subclass(Tensor), source.refusal)
    return result


def _same_tensors(a: Sequence[Tensor], b: Sequence[Tensor]) -> bool:
    return len(a) == len(b) and all(x is y for x, y in zip(a, b))


class DerivedWeight(nn.Module):
    """Base of modules whose ``weight`` is ``build_weight()``, built from ``factor_tensors()``.

    ``weight`` is built at every read and is read-only. ``merge()`` builds it once, for inference,
    and the module computes with that one until ``unmerge()`` or ``train()``; ``load_state_dict``
    and moves (``.to()``, ``.half()``, ``to_empty()``) build it again. A merged weight is a constant:
    a forward that would need gradients for the tensors it was built from raises an error, so no
    optimizer can change them behind it.
    """

    def __init__(self) -> None:
        super().__init__()
        self._merged: Optional[Tuple[Tensor, Tuple[Tensor, ...]]] = None  # (weight, the tensors it was built from)
        self.register_load_state_dict_post_hook(_merge_again)

    def build_weight(self) -> Tensor:
        raise NotImplementedError

    def factor_tensors(self) -> Tuple[Tensor, ...]:
        """Every tensor that the weight is built from."""
        raise NotImplementedError

    def weight_refusal(self) -> str:
        """What a write into ``weight`` is told."""
        return (
            f"{type(self).__name__}.weight is built from the module's other tensors when read, so a write into it "
            f"would be lost; change those tensors instead (load_state_dict(), reset_parameters(), or in place)"
        )

    @property
    def weight(self) -> Tensor:
        weight = self.current_weight()
        if torch.compiler.is_compiling():
            return weight
        return ReadOnlyWeight.of(weight, self.weight_refusal())

    def current_weight(self) -> Tensor:
        """The weight the module computes with: the merged one while merged, else built now."""
        if self._merged is not None:
            weight, factors = self._merged
            # not while torch.func.functional_call has put other tensors in place of the module's own
            if _same_tensors(factors, self.factor_tensors()):
                if torch.is_grad_enabled() and any(t.requires_grad for t in factors):
                    raise RuntimeError(
                        f"{type(self).__name__} is merged for inference (merge(), or fairseq's make_generation_fast_): "
                        f"its weight was built once, and no gradient reaches the tensors it was built from; call "
                        f"unmerge() (or train()) first, or compute under torch.no_grad()"
                    )
                return weight
        return self.build_weight()

    @property
    def merged(self) -> bool:
        return self._merged is not None

    def merge(self):
        """Builds the weight once and computes with it until ``unmerge()`` or ``train()``; returns self."""
        with torch.no_grad():
            self._merged = (self.build_weight(), self.factor_tensors())
        return self

    def unmerge(self):
        """Builds the weight at every forward again, differentiable; returns self."""
        self._merged = None
        return self

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
        module = super()._apply(fn, recurse)
        if merged:  # on the moved tensors
            self.merge()
        return module

    def __setattr__(self, name, value):
        if name == "weight":
            raise AttributeError(self.weight_refusal())
        super().__setattr__(name, value)


def _merge_again(module: DerivedWeight, incompatible_keys) -> None:
    """After ``load_state_dict``: a merged module merges the loaded tensors."""
    if module.merged:
        module.merge()
