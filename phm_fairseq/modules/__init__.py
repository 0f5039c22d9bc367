"""The layers' former home: they are the package ``phm_layers`` now (plain PyTorch, no fairseq)."""

import importlib
import sys

from phm_layers import *  # noqa: F403
from phm_layers import __all__  # noqa: F401

# Code, docs and pickles of earlier versions name phm_fairseq.modules.<submodule> (a pickled PHMLinear
# is phm_fairseq.modules.phm_linear.PHMLinear): each name is phm_layers' own module, not a copy, so its
# classes are the same objects (isinstance holds) and nothing is defined twice.
for _name in (
    "algebra",
    "derived_weight",
    "functional",
    "hypercomplex_lstm",
    "kronecker_decomposition",
    "linear_spec",
    "parameter_count",
    "parameter_groups",
    "phm_linear",
    "pooling",
    "product_rule",
    "validation",
):
    globals()[_name] = sys.modules[f"{__name__}.{_name}"] = importlib.import_module(f"phm_layers.{_name}")
del _name
