"""The one place that decides how a linear map is built: dense, PHM or quaternion.

A ``LinearSpec`` is a value: it validates itself when made (kind, n, rule, rank, shared rule, the
unshared low-rank term, factor normalisation),
checks the feature sizes of a layer or of a whole model, builds every linear map of a model,
and applies what concerns the model as a whole once its layers are built (``finish_model``).
Adding a parameterisation means changing this module, PHMLinear and its checks (``validation``,
which both use), and the one function that maps command-line flags to a spec
(``phm_fairseq.models.linear_args``); no model changes.
"""

from dataclasses import dataclass
from typing import Iterable, Optional, Union

from torch import nn

from .parameter_groups import factor_scales, lr_scale, set_scales
from .phm_linear import PHMLinear, QuaternionLinear
from .validation import RULES, check_layer_sizes, check_lowrank, check_phm_options, divisors  # noqa: F401  (RULES)

KINDS = ("dense", "phm", "quaternion")
SHARED_RULE_SCOPES = ("model", "side", "qkv")
"""One A for every PHM layer of the model, one per side (the encoder's layers, the decoder's), or one
for the Q, K and V maps of each self-attention."""


@dataclass(frozen=True)
class LinearSpec:
    """A recipe for every linear map of a model.

    kind: "dense" (``nn.Linear``), "phm" (``PHMLinear``) or "quaternion" (``QuaternionLinear``).
    n, rule, rank, shared_rule, lowrank, factor_norm: PHM only.
        n: number of Kronecker products; every layer has 1/n of the dense layer's weights.
        rule: how the A_i are obtained, see ``RULES``.
        rank: None (each S_i a full out/n x in/n matrix) or R: S_i = S_left_i @ S_right_i with
            factors (out/n x R) and (R x in/n), as Compacter's factorized weights.
        shared_rule: None (each layer its own A), "model" (one A for every PHM layer of the model),
            "side" (one for the encoder's layers, one for the decoder's) or "qkv" (one for the three
            separate Q, K, V maps of each self-attention: the fused map's parameters, its Kronecker
            blocks aligned with Q, K and V); see ``finish_model``.
        lowrank: None or 0 (no such term) or r: every layer adds an unshared term U V^T of rank r,
            H = sum_i A_i kron S_i + U V^T, r * (in + out) weights more; U starts at zero.
        factor_norm: every A_i and S_i (or S_i's factors) enters H at unit RMS, each Kronecker term
            scaled by a learned gain (n weights more a layer), as Qiu et al. (ICML 2024) normalise
            the factors of structured layers.
    rule_lr_scale, factor_lr_scale: PHM (rule: learned rules only) and quaternion (factors) layers:
        the learning rate of A and of S (or its factors), relative to the optimizer's: a number,
        or a rule of ``parameter_groups.SCALE_RULES`` that derives it from n and each layer's shape.
    rule_decay, factor_decay: whether the optimizer's weight decay applies to A and to S.
    The last four shape training only, never the layers' outputs: ``build`` records them on each
    layer (``parameter_groups.set_scales``), and ``parameter_groups.param_groups`` makes an
    optimizer's parameter groups of them.

    Every map is initialised to the variance of ``xavier_uniform_(gain)``, whatever its kind, so
    that kinds compare like for like.
    """

    kind: str = "dense"
    n: int = 1
    rule: str = "learned"
    rank: Optional[int] = None
    shared_rule: Optional[str] = None
    lowrank: Optional[int] = None
    factor_norm: bool = False
    rule_lr_scale: Union[float, str] = 1.0
    factor_lr_scale: Union[float, str] = 1.0
    rule_decay: bool = True
    factor_decay: bool = True

    def __post_init__(self):
        if self.kind not in KINDS:
            raise ValueError(f"unknown linear kind {self.kind!r}: choose one of {', '.join(KINDS)}")
        for name in ("rule_lr_scale", "factor_lr_scale"):
            try:
                object.__setattr__(self, name, lr_scale(getattr(self, name)))
            except ValueError as error:
                raise ValueError(f"{name}={error}") from None
        self._check_training_options()
        if self.kind != "phm":
            given = [
                f"{name}={value!r}"
                for name, value, default in (
                    ("n", self.n, 1),
                    ("rule", self.rule, "learned"),
                    ("rank", self.rank, None),
                    ("shared_rule", self.shared_rule, None),
                    ("lowrank", self.lowrank, None),
                    ("factor_norm", self.factor_norm, False),
                )
                if value != default
            ]
            if given:
                raise ValueError(
                    f"{', '.join(given)}: n, rule, rank and shared_rule are options of PHM layers (kind='phm'), as "
                    f"are lowrank and factor_norm, not of {self.kind} layers"
                )
            return
        n, rank = check_phm_options(self.n, self.rule, self.rank)
        object.__setattr__(self, "n", n)  # e.g. a NumPy integer: an int, so that equal specs compare equal
        object.__setattr__(self, "rank", rank)
        object.__setattr__(self, "lowrank", check_lowrank(self.lowrank))  # 0: None, the same spec
        if not isinstance(self.factor_norm, bool):
            raise ValueError(f"factor_norm must be True or False, got factor_norm={self.factor_norm!r}")
        if self.shared_rule is not None:
            if self.shared_rule not in SHARED_RULE_SCOPES:
                raise ValueError(
                    f"unknown shared_rule {self.shared_rule!r}: choose one of {', '.join(SHARED_RULE_SCOPES)} "
                    f"(or None: every layer learns its own A)"
                )
            if self.rule == "algebra-frozen":
                raise ValueError(
                    f"shared_rule={self.shared_rule!r} with rule='algebra-frozen': a frozen rule is a constant "
                    f"that every layer already has in common, so there is nothing to share; leave shared_rule "
                    f"unset, or learn the rule (rule='learned' or 'algebra-init')"
                )

    def _check_training_options(self) -> None:
        given = lambda names: [  # noqa: E731
            f"{name}={getattr(self, name)!r}" for name in names if getattr(self, name) != _TRAINING_DEFAULTS[name]
        ]
        if self.kind == "dense" and given(_TRAINING_DEFAULTS):
            raise ValueError(
                f"{', '.join(given(_TRAINING_DEFAULTS))}: learning-rate scales and weight decay by factor are options "
                f"of PHM and quaternion layers, whose weight is built from factors; a dense layer has none"
            )
        rule_options = given(("rule_lr_scale", "rule_decay"))
        if rule_options and (self.kind == "quaternion" or self.rule == "algebra-frozen"):
            layers = "quaternion layers" if self.kind == "quaternion" else "a frozen rule"
            raise ValueError(
                f"{', '.join(rule_options)}: the rule A of {layers} "
                f"is a constant, not trained: leave the rule's options out, or learn the rule (PHM, rule 'learned' or "
                f"'algebra-init')"
            )

    @property
    def divisor(self) -> int:
        """Every feature dimension of a layer built from this spec must be a multiple of it."""
        return {"dense": 1, "phm": self.n, "quaternion": 4}[self.kind]

    def check_layer(self, in_features: int, out_features: int) -> None:
        """A clear error if this spec cannot build a layer in_features -> out_features, and a
        warning where a low rank saves no weights in it."""
        check_layer_sizes(in_features, out_features, self.divisor, self.rank, self.lowrank)

    def check_sizes(self, sizes: dict, n_as: Optional[str] = None, lowrank_as: Optional[str] = None) -> None:
        """Every feature size of a model (by the name of what sets it: a flag, a label) must be a
        multiple of the divisor, and no smaller than the unshared term's rank. ``n_as`` and ``lowrank_as``
        name n and lowrank as the user gave them (e.g. "--phm-n"), so that the error names what to change
        rather than a layer deep inside the model."""
        if self.lowrank is not None and sizes:
            smallest = min(sizes, key=sizes.get)
            if self.lowrank > sizes[smallest]:
                raise ValueError(
                    f"{lowrank_as or 'lowrank='}{' ' if lowrank_as else ''}{self.lowrank} exceeds {smallest} "
                    f"{sizes[smallest]}: the unshared term U V^T of a layer has rank at most min(in, out), so "
                    f"{lowrank_as or 'lowrank'} can be at most {sizes[smallest]} with these sizes"
                )
        divisor = self.divisor
        bad = ", ".join(f"{name} {size}" for name, size in sizes.items() if size % divisor)
        if not bad:
            return
        if self.kind == "phm":
            n_given = f"{n_as} {divisor}" if n_as else f"n={divisor}"
            raise ValueError(
                f"{n_given} must divide every feature size of the model, but does not divide {bad}; "
                f"with these sizes {n_as or 'n'} can be one of {divisors(*sizes.values())}"
            )
        raise ValueError(f"{self} layers need feature sizes that are multiples of {divisor}, not {bad}")

    def build(
        self, in_features: int, out_features: int, bias: bool = True, gain: float = 1.0, device=None, dtype=None
    ) -> nn.Module:
        factory = {"device": device, "dtype": dtype}
        if self.kind == "dense":
            layer = nn.Linear(in_features, out_features, bias=bias, **factory)
            nn.init.xavier_uniform_(layer.weight, gain=gain)
            return layer
        if self.kind == "phm":
            options = {"rule": self.rule, "rank": self.rank, "lowrank": self.lowrank, "factor_norm": self.factor_norm}
            layer = PHMLinear(in_features, out_features, self.n, bias=bias, gain=gain, **options, **factory)
        else:
            layer = QuaternionLinear(in_features, out_features, bias=bias, gain=gain, **factory)
        self._set_training_scales(layer)
        return layer

    def _set_training_scales(self, layer: PHMLinear) -> None:
        """Records the lr and weight-decay scales of A and S (or its factors) on ``layer``
        (``parameter_groups.set_scales``)."""
        for names, scale, decay in (
            (("A",), self.rule_lr_scale, self.rule_decay),
            (("S", "S_left", "S_right"), self.factor_lr_scale, self.factor_decay),
        ):
            by_rule = factor_scales(layer, scale) if isinstance(scale, str) else {}
            for name in names:
                parameter = getattr(layer, name)
                if isinstance(parameter, nn.Parameter):
                    set_scales(layer, name, by_rule.get(name, scale), 1.0 if decay else 0.0)

    def finish_model(self, model: nn.Module, sides: Iterable[nn.Module] = ()) -> nn.Module:
        """What concerns the model as a whole, applied once its layers are built; returns ``model``.

        Each model family calls it once, with its sides (e.g. its encoder and decoder), so that an
        option of this sort needs no change in the models. Today: ``shared_rule`` ties the A of
        every PHM layer in scope (the model, each side, or each self-attention's Q, K and V maps) to
        the first one's, PyTorch's tied-weight idiom: one Parameter registered in each layer, so
        ``model.parameters()``, optimizers, checkpoints and parameter counts hold it once, and every
        layer sees each update of it.
        """
        if self.shared_rule is None:
            return model
        if self.shared_rule == "qkv":
            groups = [_qkv_maps(module) for module in model.modules() if getattr(module, "self_attention", False)]
            groups = [layers for layers in groups if layers]
            if not groups:
                raise ValueError(
                    "shared_rule='qkv' ties the A of each self-attention's Q, K and V maps, and this model has no "
                    "self-attention that projects them by three PHM maps: pass --qkv-projection separate"
                )
        else:
            sides = list(sides)
            scopes = sides if self.shared_rule == "side" and sides else [model]
            groups = [[module for module in scope.modules() if isinstance(module, PHMLinear)] for scope in scopes]
        for layers in groups:
            for layer in layers[1:]:
                if (layer.n, layer.rule) != (layers[0].n, layers[0].rule):
                    raise ValueError(
                        f"shared_rule={self.shared_rule!r}: a PHM layer with n={layer.n} ({layer.rule}) cannot share "
                        f"the A of one with n={layers[0].n} ({layers[0].rule})"
                    )
                # The initialisation stays calibrated whichever A is kept: a learned A has a random
                # unit vector (A_1[r,c], ..., A_n[r,c]) per block and an algebra rule exactly one +-1
                # per block, so Var(H) = Var(S) in every layer either way (see PHMLinear.reset_parameters).
                layer.A = layers[0].A
        return model

    def __str__(self) -> str:
        training = [
            f"{part} lr x{scale:g}" if isinstance(scale, float) else f"{part} lr {scale}"
            for part, scale in (("rule", self.rule_lr_scale), ("factor", self.factor_lr_scale))
            if scale != 1.0
        ]
        training += [
            f"no {part} decay"
            for part, decay in (("rule", self.rule_decay), ("factor", self.factor_decay))
            if not decay
        ]
        if self.kind == "phm":
            options = [self.rule]
            if self.rank is not None:
                options.append(f"rank {self.rank}")
            if self.lowrank is not None:
                options.append(f"+ U V^T of rank {self.lowrank}")
            if self.factor_norm:
                options.append("factors normalised")
            if self.shared_rule is not None:
                options.append(f"rule shared per {self.shared_rule}")
            return f"PHM n={self.n} ({', '.join(options + training)})"
        name = {"dense": "dense", "quaternion": "quaternion (Hamilton)"}[self.kind]
        return f"{name} ({', '.join(training)})" if training else name


def _qkv_maps(attention: nn.Module) -> list:
    """The Q, K and V maps of a (fairseq) self-attention when all three are PHM maps of their own, else []."""
    maps = [getattr(attention, name, None) for name in ("q_proj", "k_proj", "v_proj")]
    return maps if all(isinstance(m, PHMLinear) for m in maps) else []


_TRAINING_DEFAULTS = {"rule_lr_scale": 1.0, "factor_lr_scale": 1.0, "rule_decay": True, "factor_decay": True}
