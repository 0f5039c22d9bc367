"""The checks of a PHM layer's arguments, in one place.

``PHMLinear`` validates itself with these functions and ``LinearSpec`` validates a spec with them, so
the messages are the same wherever a layer is built, and neither module imports the other to do so.
"""

import math
import warnings
from typing import Optional

from .algebra import check_algebra_dim

RULES = ("learned", "algebra-init", "algebra-frozen")
"""How A is obtained: learned from a random start; learned from the algebra's rule; the
algebra's rule, frozen (a buffer, not a parameter). Algebra rules need n in 1, 2, 4, 8, 16."""


def divisors(*sizes: int) -> list:
    common = math.gcd(*sizes)
    return [m for m in range(1, common + 1) if common % m == 0]


def _is_positive_int(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 1


def check_phm_options(n, rule: str, rank) -> None:
    """A clear error for an n, rule or rank that no PHM layer can have."""
    if not _is_positive_int(n):
        raise ValueError(f"PHM n must be a positive integer, got n={n!r}")
    if rule not in RULES:
        raise ValueError(f"unknown PHM rule {rule!r}: choose one of {', '.join(RULES)}")
    if rule != "learned":
        check_algebra_dim(n)
    if rank is not None and not _is_positive_int(rank):
        raise ValueError(f"PHM rank must be a positive integer (or None for full-rank S_i), got rank={rank!r}")


def check_layer_sizes(in_features: int, out_features: int, n: int, rank: Optional[int] = None) -> None:
    """A clear error if n does not divide both feature sizes, and a warning where a low rank saves no
    weights in the layer (pointing at the caller of the function that calls this one)."""
    if in_features % n or out_features % n:
        raise ValueError(
            f"PHM layer {in_features}->{out_features}: n={n} must divide both "
            f"in_features={in_features} and out_features={out_features}; "
            f"n can be one of {divisors(in_features, out_features)}"
        )
    full, factored = in_features * out_features // n, (rank or 0) * (in_features + out_features)
    if rank is not None and factored >= full:
        saving = math.ceil(full / (in_features + out_features)) - 1  # the largest rank with factored < full
        warnings.warn(
            f"PHM layer {in_features}->{out_features}, n={n}: rank {rank} factors hold {factored:,} "
            f"weights, no fewer than the {full:,} of full-rank S_i (blocks of {out_features // n}x"
            f"{in_features // n}); "
            + (f"ranks up to {saving} save weights" if saving else "no rank saves weights in a layer this small"),
            stacklevel=3,
        )
