"""The command-line flags of every model's linear maps, and the one function that maps them to a LinearSpec."""

from ..modules import KINDS, RULES, SHARED_RULE_SCOPES, LinearSpec

PHM_FLAGS = {
    "phm_n": "--phm-n",
    "phm_rule": "--phm-rule",
    "phm_rank": "--phm-rank",
    "phm_shared_rule": "--phm-shared-rule",
}
"""The flags of PHM models only, by the attribute that argparse gives them."""


def add_linear_args(parser) -> None:
    group = parser.add_argument_group("hypercomplex layers (phm-fairseq)")
    group.add_argument(
        "--linear-kind",
        choices=KINDS,
        help="how the linear maps of the model's layers are built: dense (nn.Linear), phm or quaternion "
        "(Hamilton products); the architecture sets it (phm_* archs: phm, quaternion_*: quaternion, "
        "the others: dense)",
    )
    group.add_argument(
        "--phm-n",
        type=int,
        metavar="N",
        help="PHM models: number of Kronecker products; every PHM layer has 1/N of the weights "
        "of the dense layer it replaces. N must divide every feature size of the model",
    )
    group.add_argument(
        "--phm-rule",
        choices=RULES,
        metavar="RULE",
        help="PHM models: how the A_i are obtained: learned (default; random start), algebra-init "
        "(learned from the rule of the N-dim Cayley-Dickson algebra) or algebra-frozen "
        "(fixed to that rule); the algebra rules need N in 1, 2, 4, 8, 16",
    )
    group.add_argument(
        "--phm-shared-rule",
        choices=SHARED_RULE_SCOPES,
        help="PHM models: one A (the N^3 rule) for every PHM layer of the model, or one per side "
        "(encoder, decoder), as Compacter's shared_phm_rule; the rule is a parameter counted once. "
        "Default: every layer learns its own A",
    )
    group.add_argument(
        "--phm-rank",
        type=int,
        metavar="R",
        help="PHM models: each S_i is the product of (out/N x R) and (R x in/N) factors, as Compacter's "
        "factorized weights: R*(out+in) weights per layer instead of out*in/N. Default: full S_i",
    )


def linear_spec_from_args(args, feature_sizes: dict) -> LinearSpec:
    """The LinearSpec that the flags ask for (``args.linear_kind``, set by the architecture, and
    the PHM flags), once its sizes are checked: ``feature_sizes`` maps each flag that sets a
    feature size of the model to its value. Every error names the flags to change."""
    kind = args.linear_kind
    given = {flag: getattr(args, name) for name, flag in PHM_FLAGS.items() if getattr(args, name, None) is not None}
    if kind != "phm":
        if given:
            raise ValueError(
                f"{' '.join(f'{flag} {value}' for flag, value in given.items())}: "
                f"{', '.join(given)} {'is an option' if len(given) == 1 else 'are options'} of PHM models, and this "
                f"model is {kind} (--linear-kind {kind}): leave {'it' if len(given) == 1 else 'them'} out, or "
                f"pass --linear-kind phm"
            )
        spec = LinearSpec(kind)
    else:
        if "--phm-n" not in given:
            raise ValueError("PHM models need --phm-n N (the paper uses 2, 4, 8 and 16)")
        try:
            spec = LinearSpec(
                "phm",
                n=args.phm_n,
                rule=given.get("--phm-rule", "learned"),
                rank=given.get("--phm-rank"),
                shared_rule=given.get("--phm-shared-rule"),
            )
        except ValueError as error:
            raise ValueError(f"{' '.join(f'{flag} {value}' for flag, value in given.items())}: {error}") from None
    spec.check_sizes(feature_sizes, n_as="--phm-n")
    return spec
