"""The checks of a PHM layer's arguments, in one place.

``PHMLinear`` validates itself with these functions and ``LinearSpec`` validates a spec with them, so
the messages are the same wherever a layer is built, and neither module imports the other to do so.
"""

import math
import operator
import warnings
from typing import Optional, Tuple

from .algebra import check_algebra_dim

RULES = ("learned", "algebra-init", "algebra-frozen")
"""How A is obtained: learned from a random start; learned from the algebra's rule; the
algebra's rule, frozen (a buffer, not a parameter). Algebra rules need n in 1, 2, 4, 8, 16."""


def divisors(*sizes: int) -> list:
    common = math.gcd(*sizes)
    return [m for m in range(1, common + 1) if common % m == 0]


def _integer(value) -> Optional[int]:
    """``value`` as an int if it is an integral number (int, a NumPy integer, a 0-d integer tensor:
    anything ``operator.index`` takes), else None; bools are not numbers here."""
    if isinstance(value, bool):
        return None
    try:
        return operator.index(value)
    except TypeError:
        return None


def check_phm_options(n, rule: str, rank) -> Tuple[int, Optional[int]]:
    """A clear error for an n, rule or rank that no PHM layer can have; (n, rank) as ints."""
    number = _integer(n)
    if number is None or number < 1:
        raise ValueError(f"PHM n must be a positive integer, got n={n!r}")
    if rule not in RULES:
        raise ValueError(f"unknown PHM rule {rule!r}: choose one of {', '.join(RULES)}")
    if rule != "learned":
        check_algebra_dim(number)
    if rank is None:
        return number, None
    low = _integer(rank)
    if low is None or low < 1:
        raise ValueError(f"PHM rank must be a positive integer (or None for full-rank S_i), got rank={rank!r}")
    return number, low


def check_lowrank(lowrank) -> Optional[int]:
    """The rank of PHMLinear's unshared term U V^T as an int, or None (off) for None or 0."""
    if lowrank is None:
        return None
    rank = _integer(lowrank)
    if rank is None or rank < 0:
        raise ValueError(f"PHM lowrank must be a non-negative integer (0 or None: no U V^T), got lowrank={lowrank!r}")
    return rank or None


def check_feature_sizes(in_features, out_features) -> Tuple[int, int]:
    """(in_features, out_features) as ints: non-negative integral numbers, zero included (as
    ``nn.Linear``'s)."""
    sizes = []
    for name, value in (("in_features", in_features), ("out_features", out_features)):
        size = _integer(value)
        if size is None or size < 0:
            raise ValueError(f"PHM layer {name} must be a non-negative integer, got {name}={value!r}")
        sizes.append(size)
    return sizes[0], sizes[1]


def check_layer_sizes(
    in_features: int, out_features: int, n: int, rank: Optional[int] = None, lowrank: Optional[int] = None
) -> None:
    """A clear error if n does not divide both feature sizes or the unshared term's rank exceeds them, and
    a warning where a low rank saves no weights in the layer (pointing at the caller of the function that
    calls this one)."""
    if in_features % n or out_features % n:
        raise ValueError(
            f"PHM layer {in_features}->{out_features}: n={n} must divide both "
            f"in_features={in_features} and out_features={out_features}; "
            f"n can be one of {divisors(in_features, out_features)}"
        )
    if lowrank is not None and lowrank > min(in_features, out_features):
        raise ValueError(
            f"PHM layer {in_features}->{out_features}: lowrank={lowrank} exceeds min(in_features, out_features) = "
            f"{min(in_features, out_features)}, the largest rank that U V^T can have"
        )
    full, factored = in_features * out_features // n, (rank or 0) * (in_features + out_features)
    if rank is not None and factored >= full:
        # the largest rank with factored < full (none in a layer without weights)
        saving = math.ceil(full / (in_features + out_features)) - 1 if full else 0
        warnings.warn(
            f"PHM layer {in_features}->{out_features}, n={n}: rank {rank} factors hold {factored:,} "
            f"weights, no fewer than the {full:,} of full-rank S_i (blocks of {out_features // n}x"
            f"{in_features // n}); "
            + (f"ranks up to {saving} save weights" if saving else "no rank saves weights in a layer this small"),
            stacklevel=3,
        )
