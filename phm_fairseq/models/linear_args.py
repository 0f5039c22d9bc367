"""The command-line flags of every model's linear maps, and the one function that maps them to a LinearSpec.

Each flag is declared once, as argparse's keyword arguments in a table (LINEAR_FLAGS: every
model's; TRANSFORMER_FLAGS: the Transformers' besides), that the models' add_args and phm-compress
read: a flag added or changed here is one of theirs too."""

from ..modules import KINDS, RULES, SHARED_RULE_SCOPES, LinearSpec

LINEAR_FLAGS = {
    "--linear-kind": dict(
        choices=KINDS,
        help="how the linear maps of the model's layers are built: dense (nn.Linear), phm or quaternion "
        "(Hamilton products); the architecture sets it (phm_* archs: phm, quaternion_*: quaternion, "
        "the others: dense)",
    ),
    "--phm-n": dict(
        type=int,
        metavar="N",
        help="PHM models: number of Kronecker products; every PHM layer has 1/N of the weights "
        "of the dense layer it replaces. N must divide every feature size of the model",
    ),
    "--phm-rule": dict(
        choices=RULES,
        metavar="RULE",
        help="PHM models: how the A_i are obtained: learned (default; random start), algebra-init "
        "(learned from the rule of the N-dim Cayley-Dickson algebra) or algebra-frozen "
        "(fixed to that rule); the algebra rules need N in 1, 2, 4, 8, 16",
    ),
    "--phm-shared-rule": dict(
        choices=SHARED_RULE_SCOPES,
        help="PHM models: one A (the N^3 rule) for every PHM layer of the model, or one per side "
        "(encoder, decoder), as Compacter's shared_phm_rule; the rule is a parameter counted once. "
        "Default: every layer learns its own A",
    ),
    "--phm-rank": dict(
        type=int,
        metavar="R",
        help="PHM models: each S_i is the product of (out/N x R) and (R x in/N) factors, as Compacter's "
        "factorized weights: R*(out+in) weights per layer instead of out*in/N. Default: full S_i",
    ),
}
"""Every model's flags of its linear maps: argparse's keyword arguments by flag."""

TRANSFORMER_FLAGS = {
    "--qkv-projection": dict(
        choices=["fused", "separate"],
        help="self-attention Q, K, V: one projection of output 3 x embed_dim split three "
        "ways (fused, as Zhang et al. write it; the default of PHM models) or three "
        "projections (separate; the default of the others)",
    ),
    "--dense-ffn": dict(
        action="store_true",
        help="keep the feed-forward layers dense: only the attention projections are "
        "hypercomplex (the 'partial' variant of Tay et al.)",
    ),
    "--quaternion-attention": dict(
        action="store_true",
        help="quaternion models: Tay et al.'s attention, four logit maps from the Hamilton product of "
        "Q and K, one softmax each, each weighting its component of V (needs --qkv-projection separate)",
    ),
}
"""The flags of the plugin's Transformers (translation and classification) besides LINEAR_FLAGS."""


def dest(flag: str) -> str:
    """The attribute that argparse gives ``flag``: --phm-n: phm_n."""
    return flag.removeprefix("--").replace("-", "_")


PHM_FLAGS = {dest(flag): flag for flag in LINEAR_FLAGS if flag.startswith("--phm-")}
"""The flags of PHM models only, by the attribute that argparse gives them."""


def add_flags(group, flags: dict) -> None:
    """Adds ``flags`` (a table as LINEAR_FLAGS: keyword arguments by flag) to an argparse parser or group."""
    for flag, declaration in flags.items():
        group.add_argument(flag, **declaration)


def add_linear_args(parser) -> None:
    add_flags(parser.add_argument_group("hypercomplex layers (phm-fairseq)"), LINEAR_FLAGS)


def add_transformer_args(parser) -> None:
    add_flags(parser.add_argument_group("hypercomplex Transformer (phm-fairseq)"), TRANSFORMER_FLAGS)


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
