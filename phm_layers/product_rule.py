"""Which product a PHM layer takes for an input: the factored one (``kronecker_sum_linear``, A and
S only) or the one with H, by the number of input rows.

The rule comes from a CPU benchmark (``python -m benchmarks.bench_factored``; the measurements and
why the rule has this form: docs/benchmarks.md, "Decoding: the factored product"). The environment
variable PHM_FACTORED_MAX_ROWS overrides it for commands such as fairseq-generate.
"""

import os
from typing import Optional


def factored_crossover(in_features: int, out_features: int, n: int) -> int:
    """The most input rows for which the factored product is taken on CPU: 8 rows per 1M weights,
    at or below every crossover measured; 0 (always H) for n = 1, under 786,432 weights, and at
    n >= 16 under 1M weights, where the factored product lost at most row counts."""
    weights = in_features * out_features
    if n == 1 or weights < 786_432 or (n >= 16 and weights < 1_048_576):
        return 0
    return int(8 * weights / 1_048_576)


def factored_rows_rule(in_features: int, out_features: int, n: int) -> range:
    """The row counts that take the factored product on CPU: 2 to ``factored_crossover`` rows. One
    row by H is a matrix-vector product, at about half the time of two rows, which the factored
    product did not beat at the translation sizes' maps."""
    return range(2, factored_crossover(in_features, out_features, n) + 1)


def max_rows_from_environment() -> Optional[int]:
    """PHM_FACTORED_MAX_ROWS: a whole number of rows R >= 0, or unset (or empty) for the rule."""
    value = os.environ.get("PHM_FACTORED_MAX_ROWS", "").strip()
    if not value:
        return None
    if not (value.isascii() and value.isdigit()):
        raise ValueError(
            f"PHM_FACTORED_MAX_ROWS={value!r}: expected a number of rows, a whole number >= 0 "
            f"(0: always multiply by H; R: the factored product for inputs of up to R rows), or unset "
            f"(each layer's measured crossover, factored_crossover)"
        )
    return int(value)
