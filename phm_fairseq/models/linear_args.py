"""Command-line flags shared by every model of the plugin, and the LinearSpec they mean."""

import math

from ..modules import RULES, LinearSpec


def add_linear_args(parser) -> None:
    group = parser.add_argument_group("hypercomplex layers (phm-fairseq)")
    group.add_argument(
        "--phm-n", type=int, metavar="N",
        help="PHM models: number of Kronecker products; every PHM layer has 1/N of the weights "
             "of the dense layer it replaces. N must divide every feature size of the model",
    )
    group.add_argument(
        "--phm-rule", choices=RULES, metavar="RULE",
        help="PHM models: how the A_i are obtained: learned (default; random start), algebra-init "
             "(learned from the rule of the N-dim Cayley-Dickson algebra) or algebra-frozen "
             "(fixed to that rule); the algebra rules need N in 1, 2, 4, 8, 16",
    )


def linear_spec_from_args(args, kind: str) -> LinearSpec:
    """The LinearSpec of a model of ``kind`` ("dense", "phm" or "quaternion")."""
    if kind != "phm":
        return LinearSpec(kind)
    n = getattr(args, "phm_n", None)
    if n is None:
        raise ValueError("PHM models need --phm-n N (the paper uses 2, 4, 8 and 16)")
    try:
        return LinearSpec("phm", n=n, rule=getattr(args, "phm_rule", None) or "learned")
    except ValueError as error:
        raise ValueError(f"--phm-n {n} --phm-rule {args.phm_rule}: {error}") from None


def check_feature_sizes(spec: LinearSpec, sizes: dict) -> None:
    """Every feature size (by the flag that sets it) must be a multiple of the spec's divisor.

    Raised when the model is built, so the error names flags rather than a layer deep inside.
    """
    divisor = spec.divisor
    bad = ", ".join(f"{flag} {size}" for flag, size in sizes.items() if size % divisor)
    if not bad:
        return
    if spec.kind == "phm":
        common = math.gcd(*sizes.values())
        options = [m for m in range(1, common + 1) if common % m == 0]
        raise ValueError(
            f"--phm-n {divisor} must divide every feature size of the model, but does not divide "
            f"{bad}; with these sizes --phm-n can be one of {options}"
        )
    raise ValueError(f"{spec} layers need feature sizes that are multiples of {divisor}, not {bad}")
