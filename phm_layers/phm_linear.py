"""PHM linear layer (Zhang et al., ICLR 2021) and the quaternion layer it generalises.

Layout follows ``nn.Linear``: ``y = x H^T + b`` with H of shape (out_features, in_features),
    H = sum_{i=1..n} A_i kron S_i,    A (n, n, n),   S (n, out_features/n, in_features/n),
so the layer has out*in/n + n^3 weights instead of out*in. With a rank R, each S_i is the
product S_left_i @ S_right_i of (out/n x R) and (R x in/n) factors: R*(out+in) + n^3 weights.
Two options beyond the paper (issue 56): an unshared low-rank term, H = sum_i A_i kron S_i + U V^T
with U (out, r) and V (in, r), r*(out+in) weights more; and factor normalisation, every A_i and S_i
(or S_i's factors) at unit RMS with one learned gain per Kronecker term, n weights more.
"""

import math
from typing import Optional, Tuple

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from .algebra import ALGEBRAS, multiplication_rule
from .derived_weight import DerivedWeight
from .functional import factor_rms, kronecker_sum, kronecker_sum_linear, unit_rms
from .product_rule import factored_rows_rule, max_rows_from_environment
from .validation import check_feature_sizes, check_layer_sizes, check_lowrank, check_phm_options


class PHMLinear(DerivedWeight):
    """Parameterized hypercomplex multiplication layer: an ``nn.Linear`` with 1/n of the weights.

    Args:
        in_features, out_features: as for ``nn.Linear``; both must be divisible by ``n``.
        n: number of Kronecker products (the hypercomplex dimension); n=1 is a dense layer.
        bias: learn an additive bias (of ``out_features``, not compressed).
        rule: "learned" (default), "algebra-init" or "algebra-frozen"; see ``RULES``.
        gain: the init targets the variance of ``nn.init.xavier_uniform_(W, gain)``.
        device, dtype: where and in which type the parameters are made, as for ``nn.Linear``.
        rank: None (default: each S_i is a full matrix, the Parameter ``S``) or R: each S_i is
            ``S_left[i] @ S_right[i]``, factors of (out_features/n, R) and (R, in_features/n).
        lowrank: None or 0 (default: no such term) or r <= min(in_features, out_features): H gains an
            unshared term ``U @ V.T``, U (out_features, r) and V (in_features, r), the "doped" Kronecker
            sum; U starts at zero, so the layer starts as the plain PHM layer.
        factor_norm: every A_i and S_i (low rank: S_left_i and S_right_i) enters H divided by its RMS,
            and each Kronecker term is scaled by a learned gain ``term_gain[i]`` (times a constant of
            the layer's shape, ``term_scale``), as Qiu et al. (ICML 2024) normalise each factor of a
            structured layer. The gains start where H equals the unnormalised layer's.

    The arguments are checked by ``validation``, as ``LinearSpec`` checks a spec (the messages are
    the same wherever a layer is built). ``kronecker_factors()`` gives (A, S) with S built from
    its factors when low rank.

    ``weight`` is H, computed when read (fairseq's attention reads it), each read a new tensor;
    ``merge()`` keeps one H for inference (``DerivedWeight``). A forward of few rows (decoding) skips H and
    multiplies by A and S directly, reading 1/n of the bytes (``kronecker_sum_linear``; see
    ``factored_max_rows``); both products give F.linear(x, H, b).
    """

    __constants__ = ["in_features", "out_features", "n"]
    __jit_unused_properties__ = ["weight", "merged"]

    factored_max_rows: Optional[int] = max_rows_from_environment()
    """Inputs of 1 to this many rows (the product of the leading dims) are multiplied in factored
    form (``kronecker_sum_linear``), others by H. None: the measured rule (``factored_rows_rule``
    of the layer's shape on CPU, elsewhere always H). Set it on the class or on one layer to
    override (0: always H), or with the environment variable PHM_FACTORED_MAX_ROWS for commands
    such as fairseq-generate."""

    def __init__(
        self,
        in_features: int,
        out_features: int,
        n: int,
        bias: bool = True,
        rule: str = "learned",
        gain: float = 1.0,
        device=None,
        dtype=None,
        rank: Optional[int] = None,
        lowrank: Optional[int] = None,
        factor_norm: bool = False,
    ) -> None:
        super().__init__()
        n, rank = check_phm_options(n, rule, rank)
        lowrank = check_lowrank(lowrank)
        in_features, out_features = check_feature_sizes(in_features, out_features)
        check_layer_sizes(in_features, out_features, n, rank, lowrank)
        factory = {"device": device, "dtype": dtype}
        self.in_features, self.out_features, self.n = in_features, out_features, n
        self.rule, self.gain, self.rank, self.lowrank = rule, gain, rank, lowrank
        self.factor_norm = bool(factor_norm)
        blocks = (n, out_features // n, in_features // n)
        if rank is None:
            self.S = nn.Parameter(torch.empty(*blocks, **factory))
            self.register_parameter("S_left", None)
            self.register_parameter("S_right", None)
        else:
            self.register_parameter("S", None)
            self.S_left = nn.Parameter(torch.empty(n, blocks[1], rank, **factory))
            self.S_right = nn.Parameter(torch.empty(n, rank, blocks[2], **factory))
        if rule == "algebra-frozen":
            # A constant of the architecture, so not saved in checkpoints.
            self.register_buffer("A", torch.empty(n, n, n, **factory), persistent=False)
        else:
            self.A = nn.Parameter(torch.empty(n, n, n, **factory))
        self.bias = nn.Parameter(torch.empty(out_features, **factory)) if bias else None
        # registered after the paper's parameters, so that a layer without these options has exactly the
        # parameters (names, order, initial values) that it had before they existed
        if lowrank is None:
            self.register_parameter("U", None)
            self.register_parameter("V", None)
        else:
            self.U = nn.Parameter(torch.empty(out_features, lowrank, **factory))
            self.V = nn.Parameter(torch.empty(in_features, lowrank, **factory))
        # term_gain ~ 1 and a constant scale, rather than a gain of H's own scale: Adam steps a parameter by
        # about lr whatever its size, so a gain near 1 moves by lr relative to itself, as LayerNorm's weight.
        # Normalised, H's block (r, c) sums n terms A_i[r, c] S_i of unit variance (rank R: R), hence the root.
        self.term_scale = gain * math.sqrt(2.0 / max(in_features + out_features, 1) / (n * (rank or 1)))
        self.term_gain = nn.Parameter(torch.empty(n, **factory)) if self.factor_norm else None
        self.reset_parameters()

    def reset_parameters(self) -> None:
        with torch.no_grad():
            if self.rule == "learned":
                # A random unit vector (A_1[r,c], ..., A_n[r,c]) for every block (r, c) ...
                A = torch.randn_like(self.A)
                self.A.copy_(A / A.norm(dim=0, keepdim=True))
            else:
                # ... or the algebra's rule, which has exactly one +-1 per block: either way
                # Var(H[block r,c]) = sum_i A_i[r,c]^2 Var(S) = Var(S), so S takes the
                # dense layer's xavier-uniform distribution.
                self.A.copy_(multiplication_rule(self.n))
            if self.S is not None:
                bound = self.gain * math.sqrt(6.0 / max(self.in_features + self.out_features, 1))
                nn.init.uniform_(self.S, -bound, bound)
            else:
                # Entries of S_left_i @ S_right_i are sums of `rank` products of independent
                # factor entries: factors of variance std / sqrt(rank) each give S_i the dense
                # layer's xavier variance std^2 = 2 gain^2 / (in + out), whatever the rank.
                std = self.gain * math.sqrt(2.0 / max(self.in_features + self.out_features, 1))
                bound = math.sqrt(3.0 * std / math.sqrt(self.rank))
                nn.init.uniform_(self.S_left, -bound, bound)
                nn.init.uniform_(self.S_right, -bound, bound)
            self._reset_bias()
            self._reset_options()
        self.merge_again()

    def _reset_options(self) -> None:
        """Initialises U, V and the term gains, once A and S are (drawn after them: A and S are what a
        layer without these options draws)."""
        with torch.no_grad():
            if self.U is not None:
                # U = 0: H starts as the plain PHM layer's, at the variance of xavier_uniform_ (the init
                # contract), and training starts from it (peft's LoRA zeroes its B likewise). V takes the
                # dense layer's xavier distribution: not zero, or U would get no gradient.
                bound = self.gain * math.sqrt(6.0 / max(self.in_features + self.out_features, 1))
                nn.init.zeros_(self.U)
                nn.init.uniform_(self.V, -bound, bound)
            self.reset_term_gains()

    def reset_term_gains(self) -> None:
        """With factor_norm: the gains that make the normalised terms give exactly the H of the factors as
        they stand (term_scale * term_gain_i = rms(A_i) rms(S_i)), e.g. after A and S are written."""
        if self.term_gain is None:
            return
        with torch.no_grad():
            scale = factor_rms(self.A)
            for factor in self._s_factors():
                scale = scale * factor_rms(factor)
            self.term_gain.copy_(scale / self.term_scale)
        self.merge_again()

    def _s_factors(self) -> Tuple[Tensor, ...]:
        return (self.S,) if self.S is not None else (self.S_left, self.S_right)

    def _reset_bias(self) -> None:
        if self.bias is not None:  # as nn.Linear does (0 without inputs)
            bound = 1.0 / math.sqrt(self.in_features) if self.in_features > 0 else 0.0
            nn.init.uniform_(self.bias, -bound, bound)

    def kronecker_factors(self) -> Tuple[Tensor, Tensor]:
        """(A, S) of the Kronecker terms sum_i A_i kron S_i of H; S is built from its factors when the layer
        is low rank; with factor_norm, both as H uses them (normalised, A_i scaled by its term's gain)."""
        A = self.A
        if self.S is not None:
            S = self.S
        else:
            S_left, S_right = self.S_left, self.S_right
            if self.term_gain is not None:
                S_left, S_right = unit_rms(S_left), unit_rms(S_right)
            S = torch.matmul(S_left, S_right)
        if self.term_gain is not None:
            A = self._gained_rule()
            if self.S is not None:
                S = unit_rms(S)
        return A, S

    def _gained_rule(self) -> Tensor:
        """With factor_norm: each A_i at unit RMS, times term_scale * term_gain_i."""
        assert self.term_gain is not None
        gains = self.term_gain.to(self.A.dtype) * self.term_scale
        return unit_rms(self.A) * gains.view(-1, 1, 1)

    def factor_tensors(self) -> Tuple[Tensor, ...]:
        """Every tensor that H is built from: A (possibly shared with other layers), S or its factors, and
        U, V and the term gains where the layer has them."""
        tensors = (self.A, self.S) if self.S is not None else (self.A, self.S_left, self.S_right)
        for option in (self.U, self.V, self.term_gain):
            if option is not None:
                tensors = tensors + (option,)
        return tensors

    def build_weight(self) -> Tensor:
        """H (out_features, in_features), differentiable in every tensor it is built from."""
        A, S = self.kronecker_factors()
        weight = kronecker_sum(A, S)
        if self.U is not None and self.V is not None:
            weight = weight + torch.matmul(self.U, self.V.t())
        return weight

    def forward(self, input: Tensor) -> Tensor:
        if torch.jit.is_scripting():
            return F.linear(input, self.build_weight(), self.bias)
        rows = self.factored_rows(input.device)
        if rows.start <= input.shape[:-1].numel() < rows.stop:  # not `in`: the count may be symbolic (torch.compile)
            A, S = self.A, self._s_factors()
            if self.term_gain is not None:
                A, S = self._gained_rule(), tuple(unit_rms(factor) for factor in S)
            output = kronecker_sum_linear(input, A, S[0] if len(S) == 1 else S, self.bias)
            if self.U is not None:  # x V U^T: r (in + out) multiply-adds a row
                output = output + F.linear(torch.matmul(input, self.V), self.U)
            return output
        return F.linear(input, self.current_weight(), self.bias)

    def factored_rows(self, device: Optional[torch.device] = None) -> range:
        """The row counts (the product of the input's leading dims) that take the factored product;
        every other count takes the product with H."""
        if self.factored_max_rows is not None:
            return range(1, self.factored_max_rows + 1)
        if device is not None and device.type != "cpu":
            return range(0)  # the rule was measured on CPU only
        return factored_rows_rule(self.in_features, self.out_features, self.n)

    def _load_from_state_dict(self, *args, **kwargs):
        super()._load_from_state_dict(*args, **kwargs)
        if self.rule == "algebra-frozen":
            # a constant, so in no checkpoint: set by every load, whatever A held (to_empty() leaves it
            # uninitialised) and wherever the loaded S now lives (assign=True)
            like = self.factor_tensors()[-1]
            self.A = multiplication_rule(self.n).to(like.device, like.dtype)

    def weight_refusal(self) -> str:
        names = ["A", "S"] if self.S is not None else ["A", "S_left", "S_right"]
        names += [name for name in ("U", "V", "term_gain") if getattr(self, name) is not None]
        factors = f"{', '.join(names[:-1])} and {names[-1]}"
        return (
            f"{type(self).__name__}.weight is H = sum_i A_i kron S_i, computed from {factors} when read, and "
            f"cannot be assigned. For the layer nearest to a dense weight W (keeping its bias), call "
            f"phm_layers.fit_phm_layer(layer, W), which returns how near it came; or change {factors}: "
            f"in place under torch.no_grad(), with load_state_dict() or reset_parameters()"
        )

    def to_dense(self) -> nn.Linear:
        """An equivalent ``nn.Linear`` holding H, e.g. to run the model in stock fairseq."""
        with torch.no_grad():
            weight = self.build_weight()
        dense = nn.Linear(
            self.in_features,
            self.out_features,
            bias=self.bias is not None,
            device=weight.device,
            dtype=weight.dtype,
        )
        with torch.no_grad():
            dense.weight.copy_(weight)
            if self.bias is not None:
                dense.bias.copy_(self.bias)
        return dense

    @property
    def dense_parameter_count(self) -> int:
        """Parameters of the ``nn.Linear`` this layer replaces."""
        return self.in_features * self.out_features + (self.out_features if self.bias is not None else 0)

    def extra_repr(self) -> str:
        params = sum(p.numel() for p in self.parameters(recurse=False))
        rule = self.rule if self.rule == "learned" else f"{self.rule} ({ALGEBRAS[self.n]})"
        options = [("rank", self.rank), ("lowrank", self.lowrank), ("factor_norm", self.factor_norm or None)]
        options = "".join(f"{name}={value}, " for name, value in options if value is not None)
        return (
            f"in_features={self.in_features}, out_features={self.out_features}, n={self.n}, "
            f"rule={rule}, {options}bias={self.bias is not None}, "
            f"params={params:,}"
            + (f" ({params / self.dense_parameter_count:.3f}x dense)" if self.dense_parameter_count else "")
        )


class QuaternionLinear(PHMLinear):
    """Hamilton-product layer (Parcollet et al., ICLR 2019; Tay et al., ACL 2019).

    PHM with n=4 and A frozen to Hamilton's rule; S holds the component weights
    W_r, W_x, W_y, W_z, initialised with Parcollet et al.'s polar (quaternion) scheme.
    """

    def __init__(self, in_features, out_features, bias=True, gain=1.0, device=None, dtype=None):
        super().__init__(
            in_features,
            out_features,
            n=4,
            bias=bias,
            rule="algebra-frozen",
            gain=gain,
            device=device,
            dtype=dtype,
        )

    def reset_parameters(self) -> None:
        with torch.no_grad():
            self.A.copy_(multiplication_rule(4))
            # W = |W| (cos theta + u sin theta): |W| ~ sigma * chi(4), theta ~ U(-pi, pi),
            # u a uniform random unit pure quaternion. E|W|^2 = 4 sigma^2 spread over 4
            # components gives every entry of H the xavier variance 2 gain^2 / (in + out).
            sigma = self.gain / math.sqrt(max(self.in_features + self.out_features, 1) / 2)
            shape = self.S.shape[1:]
            like = {"device": self.S.device, "dtype": self.S.dtype}
            modulus = sigma * torch.randn(4, *shape, **like).norm(dim=0)
            phase = torch.empty(shape, **like).uniform_(-math.pi, math.pi)
            axis = torch.randn(3, *shape, **like)
            axis = axis / axis.norm(dim=0, keepdim=True)
            self.S[0] = modulus * torch.cos(phase)
            self.S[1:] = modulus * torch.sin(phase) * axis
            self._reset_bias()
        self.merge_again()
