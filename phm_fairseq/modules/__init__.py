"""Hypercomplex layers in plain PyTorch (no fairseq import): usable in any model."""

from .algebra import ALGEBRAS, multiplication_rule, structure_constants
from .linear_spec import KINDS, LinearSpec
from .parameter_count import ParameterCount, count_parameters
from .phm_linear import RULES, PHMLinear, QuaternionLinear, kronecker_sum

__all__ = [
    "ALGEBRAS",
    "KINDS",
    "RULES",
    "LinearSpec",
    "ParameterCount",
    "PHMLinear",
    "QuaternionLinear",
    "count_parameters",
    "kronecker_sum",
    "multiplication_rule",
    "structure_constants",
]
