"""PHM, quaternion and hypercomplex LSTM layers in plain PyTorch, usable in any ``nn.Module``.

The package imports torch alone (neither fairseq nor phm_fairseq): docs/pytorch.md has an example
outside fairseq; the fairseq plugin ``phm_fairseq`` builds its models from these layers.
"""

from .algebra import ALGEBRAS, multiplication_rule, structure_constants
from .functional import kronecker_sum, kronecker_sum_linear
from .hypercomplex_lstm import GATE_LAYOUTS, HypercomplexLSTM
from .kronecker_decomposition import (
    KroneckerFactors,
    fit_phm_layer,
    load_kronecker_factors,
    nearest_kronecker_sum,
    nearest_with_rule,
)
from .linear_spec import KINDS, RULES, SHARED_RULE_SCOPES, LinearSpec
from .parameter_count import ParameterCount, count_parameters
from .phm_linear import PHMLinear, QuaternionLinear
from .pooling import max_mean_pool, mean_pool

__all__ = [
    "ALGEBRAS",
    "GATE_LAYOUTS",
    "HypercomplexLSTM",
    "KINDS",
    "KroneckerFactors",
    "RULES",
    "SHARED_RULE_SCOPES",
    "LinearSpec",
    "ParameterCount",
    "PHMLinear",
    "QuaternionLinear",
    "count_parameters",
    "fit_phm_layer",
    "kronecker_sum",
    "kronecker_sum_linear",
    "load_kronecker_factors",
    "max_mean_pool",
    "mean_pool",
    "multiplication_rule",
    "nearest_kronecker_sum",
    "nearest_with_rule",
    "structure_constants",
]
