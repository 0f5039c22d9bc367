"""The command-line flags of every model's linear maps, and the one function that maps them to a LinearSpec.

Each flag is declared once, as argparse's keyword arguments in a table (LINEAR_FLAGS: every
model's; TRANSFORMER_FLAGS: the Transformers' besides), that the models' add_args and phm-compress
read: a flag added or changed here is one of theirs too."""

from phm_layers import KINDS, RULES, SHARED_RULE_SCOPES, LinearSpec
from phm_layers.parameter_groups import lr_scale

from .attention import FUSED_QKV_INITS

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
        help="PHM models: one A (the N^3 rule) for every PHM layer of the model, one per side "
        "(encoder, decoder), as Compacter's shared_phm_rule, or one for the Q, K and V maps of each "
        "self-attention (qkv, with --qkv-projection separate: the fused map's parameters, its Kronecker "
        "blocks aligned with Q, K and V); the rule is a parameter counted once. Default: every layer "
        "learns its own A",
    ),
    "--phm-rank": dict(
        type=int,
        metavar="R",
        help="PHM models: each S_i is the product of (out/N x R) and (R x in/N) factors, as Compacter's "
        "factorized weights: R*(out+in) weights per layer instead of out*in/N. Default: full S_i",
    ),
    "--phm-lowrank": dict(
        type=int,
        metavar="R",
        help="PHM models: every PHM layer adds an unshared term of rank R to its Kronecker sum, "
        "H = sum_i A_i kron S_i + U V^T with U (out x R) and V (in x R): R*(out+in) weights more per layer. "
        "U starts at zero, so training starts from the plain PHM layer. R is at most the smallest feature size; "
        "0: no such term (default). Not --phm-rank, which factorises each S_i",
    ),
    "--phm-factor-norm": dict(
        action="store_true",
        default=None,  # None: not given (a PHM flag given to another model is refused)
        help="PHM models: every A_i and S_i (or S_i's --phm-rank factors) enters H at unit RMS, and each "
        "Kronecker term is scaled by a learned gain, as Qiu et al. (ICML 2024) normalise the factors of "
        "structured layers: N weights more per layer; the gains start where H is the unnormalised layer's",
    ),
    "--rule-lr-scale": dict(
        type=lr_scale,
        metavar="SCALE",
        help="PHM models with a learned rule: the learning rate of every A, relative to the optimizer's "
        "(whatever the lr scheduler sets): a number, or 'balanced' (each layer's A takes the same step "
        "relative to its scale as a dense weight: 1 / (sqrt(N) rms of the dense layer's init)) or 'mup' "
        "(in_features / N: lr inversely proportional to fan-in, per factor). Default: 1",
    ),
    "--factor-lr-scale": dict(
        type=lr_scale,
        metavar="SCALE",
        help="PHM and quaternion models: the learning rate of every S (or its low-rank factors), relative "
        "to the optimizer's: a number, 'balanced' (1 for full S) or 'mup' (N for full S). Default: 1",
    ),
    "--no-rule-decay": dict(
        action="store_true",
        help="PHM models with a learned rule: no weight decay on A (the optimizer's --weight-decay applies "
        "to the other parameters)",
    ),
    "--no-factor-decay": dict(
        action="store_true",
        help="PHM and quaternion models: no weight decay on S (or its low-rank factors)",
    ),
    "--log-parameter-stats": dict(
        action="store_true",
        help="log, per kind of parameter (rule, factor, dense, bias, norm, embedding), the gradient norm "
        "(gnorm_<kind>), the parameter norm (pnorm_<kind>) and the relative update of each step "
        "(update_<kind>), averaged like fairseq's own training statistics (json log, --tensorboard-logdir); "
        "fairseq's Trainer attaches them to its optimizer (phm_fairseq.models.training)",
    ),
}
"""Every model's flags of its linear maps: argparse's keyword arguments by flag."""

TRAINING_FLAGS = {
    "rule_lr_scale": "--rule-lr-scale",
    "factor_lr_scale": "--factor-lr-scale",
    "rule_decay": "--no-rule-decay",
    "factor_decay": "--no-factor-decay",
}
"""The flags that shape how the maps' factors are trained, by the LinearSpec field that each sets."""

TRANSFORMER_FLAGS = {
    "--qkv-projection": dict(
        choices=["fused", "separate"],
        help="self-attention Q, K, V: one projection of output 3 x embed_dim split three "
        "ways (fused, as Zhang et al. write it; the default of PHM models) or three "
        "projections (separate; the default of the others)",
    ),
    "--fused-qkv-init": dict(
        choices=FUSED_QKV_INITS,
        help="--qkv-projection fused: initialise the fused map as one embed_dim -> 3 x embed_dim map "
        "(one-map, the default: xavier's variance over the whole map, half what fairseq gives each of Q, K "
        "and V) or each of its thirds as fairseq initialises a projection of its own (per-projection: "
        "the variance of the separate projections and of the dense twin)",
    ),
    "--dense-ffn": dict(
        action="store_true",
        help="keep the feed-forward layers dense: only the attention projections are "
        "hypercomplex (the 'partial' variant of Tay et al.)",
    ),
    "--dense-attention": dict(
        action="store_true",
        help="keep the attention projections dense: only the feed-forward layers are hypercomplex (the "
        "reverse of --dense-ffn). The PHM architectures project Q, K, V by one fused map: add "
        "--qkv-projection separate for fairseq's own three",
    ),
    "--quaternion-attention": dict(
        action="store_true",
        help="quaternion models: Tay et al.'s attention, four logit maps from the Hamilton product of "
        "Q and K, one softmax each, each weighting its component of V (needs --qkv-projection separate)",
    ),
    "--phydi": dict(
        action="store_true",
        help="PHYDI (Mancanelli et al., MLSP 2023): every residual branch (self-attention, encoder "
        "attention, feed-forward) is multiplied by a learned scalar that starts at 0, so that each layer "
        "starts as the identity (ReZero's gate); any kind of linear map",
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
    training = training_options_from_args(args)
    if kind != "phm":
        if given:
            raise ValueError(
                f"{_given(given)}: "
                f"{', '.join(given)} {'is an option' if len(given) == 1 else 'are options'} of PHM models, and this "
                f"model is {kind} (--linear-kind {kind}): leave {'it' if len(given) == 1 else 'them'} out, or "
                f"pass --linear-kind phm"
            )
        try:
            spec = LinearSpec(kind, **training)
        except ValueError as error:
            raise ValueError(f"{_flags(training)}: {error}") from None
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
                lowrank=given.get("--phm-lowrank"),
                factor_norm=bool(given.get("--phm-factor-norm", False)),
                **training,
            )
        except ValueError as error:
            flags = " ".join([_given(given), _flags(training)])
            raise ValueError(f"{flags.strip()}: {error}") from None
    spec.check_sizes(feature_sizes, n_as="--phm-n", lowrank_as="--phm-lowrank")
    _check_optimizer_sees_parameters(args)
    return spec


def training_options_from_args(args) -> dict:
    """The LinearSpec fields that TRAINING_FLAGS set (those given only)."""
    options = {}
    for field in ("rule_lr_scale", "factor_lr_scale"):
        if getattr(args, field, None) is not None:
            options[field] = getattr(args, field)
    for field in ("rule_decay", "factor_decay"):
        if getattr(args, f"no_{field}", False):
            options[field] = False
    return options


def _given(flags: dict) -> str:
    """Flags as the command line gave them: --phm-n 4 --phm-factor-norm."""
    return " ".join(flag if value is True else f"{flag} {value}" for flag, value in flags.items())


def _flags(training: dict) -> str:
    return " ".join(
        f"{TRAINING_FLAGS[field]} {value}" if not isinstance(value, bool) else TRAINING_FLAGS[field]
        for field, value in training.items()
    )


def _check_optimizer_sees_parameters(args) -> None:
    """Scales by factor and statistics by kind act on the parameters that the optimizer steps; fairseq's
    --fp16 (FP16Optimizer) steps fp32 copies instead: one flat copy of them all, unless
    --fp16-no-flatten-grads, where each copy keeps its scales but the statistics would miss them."""
    half = getattr(args, "fp16", False) or getattr(args, "bf16", False)
    if not half or getattr(args, "memory_efficient_fp16", False) or getattr(args, "memory_efficient_bf16", False):
        return
    if getattr(args, "log_parameter_stats", False):
        raise ValueError(
            "--log-parameter-stats with --fp16: fairseq's FP16Optimizer steps fp32 copies of the parameters, "
            "not the model's own; train with --memory-efficient-fp16 or --amp"
        )
    training = training_options_from_args(args)
    if training and not getattr(args, "fp16_no_flatten_grads", False):
        raise ValueError(
            f"{_flags(training)} with --fp16: fairseq's FP16Optimizer steps one flat fp32 copy of all the "
            f"parameters, in which A and S cannot be told apart; add --fp16-no-flatten-grads, or train with "
            f"--memory-efficient-fp16 or --amp"
        )
