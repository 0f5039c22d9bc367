"""The one place that decides how a linear map is built: dense, PHM or quaternion."""

from dataclasses import dataclass

from torch import nn

from .algebra import check_algebra_dim
from .phm_linear import RULES, PHMLinear, QuaternionLinear

KINDS = ("dense", "phm", "quaternion")


@dataclass(frozen=True)
class LinearSpec:
    """A recipe for every linear map of a model.

    kind: "dense" (``nn.Linear``), "phm" (``PHMLinear`` with ``n`` and ``rule``) or
    "quaternion" (``QuaternionLinear``). Every map is initialised to the variance of
    ``xavier_uniform_(gain)``, whatever its kind, so that kinds compare like for like.
    """

    kind: str = "dense"
    n: int = 1
    rule: str = "learned"

    def __post_init__(self):
        if self.kind not in KINDS:
            raise ValueError(f"unknown linear kind {self.kind!r}: choose one of {', '.join(KINDS)}")
        if self.kind == "phm":
            if not isinstance(self.n, int) or self.n < 1:
                raise ValueError(f"PHM n must be a positive integer, got n={self.n!r}")
            if self.rule not in RULES:
                raise ValueError(f"unknown PHM rule {self.rule!r}: choose one of {', '.join(RULES)}")
            if self.rule != "learned":
                check_algebra_dim(self.n)

    @property
    def divisor(self) -> int:
        """Every feature dimension of a layer built from this spec must be a multiple of it."""
        return {"dense": 1, "phm": self.n, "quaternion": 4}[self.kind]

    def build(self, in_features: int, out_features: int, bias: bool = True, gain: float = 1.0) -> nn.Module:
        if self.kind == "phm":
            return PHMLinear(in_features, out_features, self.n, bias=bias, rule=self.rule, gain=gain)
        if self.kind == "quaternion":
            return QuaternionLinear(in_features, out_features, bias=bias, gain=gain)
        layer = nn.Linear(in_features, out_features, bias=bias)
        nn.init.xavier_uniform_(layer.weight, gain=gain)
        return layer

    def __str__(self) -> str:
        if self.kind == "phm":
            return f"PHM n={self.n} ({self.rule})"
        return {"dense": "dense", "quaternion": "quaternion (Hamilton)"}[self.kind]
