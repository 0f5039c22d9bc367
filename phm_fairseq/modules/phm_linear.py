"""PHM linear layer (Zhang et al., ICLR 2021) and the quaternion layer it generalises.

Layout follows ``nn.Linear``: ``y = x H^T + b`` with H of shape (out_features, in_features),
    H = sum_{i=1..n} A_i kron S_i,    A (n, n, n),   S (n, out_features/n, in_features/n),
so the layer has out*in/n + n^3 weights instead of out*in. With a rank R, each S_i is the
product S_left_i @ S_right_i of (out/n x R) and (R x in/n) factors: R*(out+in) + n^3 weights.
"""

import math
import os
from functools import lru_cache
from typing import Optional, Tuple

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch._C._functorch import is_functorch_wrapped_tensor as _is_functorch_wrapper

from .algebra import ALGEBRAS, multiplication_rule
from .validation import RULES, check_feature_sizes, check_layer_sizes, check_phm_options  # noqa: F401  (RULES, as before)


def kronecker_sum(A: Tensor, S: Tensor) -> Tensor:
    """sum_i A_i kron S_i as one contraction, without materialising the (n, k, d) stack.

    Block (r, c) of the result is sum_i A[i, r, c] S_i.
    """
    n, k, d = S.shape
    return torch.einsum("irc,ipq->rpcq", A, S).reshape(n * k, n * d)


def kronecker_sum_linear(input: Tensor, A: Tensor, S, bias: Optional[Tensor] = None) -> Tensor:
    """``F.linear(input, kronecker_sum(A, S), bias)`` without building H.

    With the input split into n blocks x_c, output block r is y_r = sum_i S_i (sum_c A_i[r, c] x_c):
    the dense layer's multiply-adds, plus n^2 per feature of the smaller side for the mix by A, while
    reading only S (1/n of H's entries) and using each S_i for n blocks at once. It pays when few
    rows pass (decoding: a beam's rows per step), where multiplying by H is bound by reading H.
    ``S`` is (n, out/n, in/n), or the pair (S_left, S_right) of a low-rank layer, whose S_i are
    then never built: y_r = sum_i S_left_i (S_right_i (sum_c A_i[r, c] x_c)).
    """
    low_rank = isinstance(S, tuple)
    n = A.shape[0]
    k, d = (S[0].shape[1], S[1].shape[2]) if low_rank else S.shape[1:]  # out/n, in/n
    rows = input.shape[:-1].numel()
    x = input.reshape(rows, n, d)
    if low_rank or d <= k:  # mix the input blocks by A, then batched products with the S_i, summed over i
        z = torch.matmul(A.reshape(n * n, n), x)  # (rows, i * n + r, d) = sum_c A[i, r, c] x_c
        z = z.view(rows, n, n, d).transpose(0, 1).reshape(n, rows * n, d)
        if low_rank:
            z = torch.bmm(z, S[1].transpose(1, 2))  # (i, rows * n, R)
        y = torch.bmm(z, (S[0] if low_rank else S).transpose(1, 2)).sum(0)  # (rows * n, k): row (b, r) is y_r of row b
    else:  # the S_i first, on every input block, then mix the output blocks by A
        products = torch.matmul(x.reshape(1, rows * n, d), S.transpose(1, 2))  # (i, rows * c, k)
        products = products.view(n, rows, n, k).transpose(0, 1).reshape(rows, n * n, k)
        y = torch.matmul(A.transpose(0, 1).reshape(n, n * n), products)  # (rows, r, k)
    y = y.reshape(*input.shape[:-1], n * k)
    # as F.linear under autocast, the bias joins in the product's dtype
    return y if bias is None else y + bias.to(y.dtype)


@lru_cache(maxsize=None)
def factored_crossover(in_features: int, out_features: int, n: int) -> int:
    """The most input rows for which PHMLinear takes the factored product (``kronecker_sum_linear``)
    rather than the product with its cached H, from a CPU benchmark (from 2 rows:
    ``factored_rows_rule``).

    ``python -m benchmarks.bench_factored`` (benchmarks/results/factored_cpu.md, 2 threads, fp32,
    eval) times the two products against each other over 1 to 256 rows for the maps of every
    translation size (AMD EPYC, 2026-11-23 to -25):
    - under ~786K weights (512 x 1536, the base size's fused Q/K/V) the factored product lost at
      every count or won only at a few counts between 4 and 12 rows: such weights sit in the
      caches, and its five kernels cost more than the one they replace;
    - from 2 rows, it won up to 4-32 rows at 512 x 1536, 12-256 at 512 x 2048 and 2048 x 512, and
      32-256 at 1024 x 4096; where it lost, it lost more as n grew (its mix by A costs n^2 per
      feature); near the crossover both products are within a few percent.
    The rule stays at or below every measured crossover: 8 rows per 1M weights (n >= 16 needs at
    least 1M weights), so that it never picks the slower product by much.
    """
    weights = in_features * out_features
    if n == 1 or weights < 786_432 or (n >= 16 and weights < 1_048_576):
        return 0
    return int(8 * weights / 1_048_576)


@lru_cache(maxsize=None)  # asked at every forward
def factored_rows_rule(in_features: int, out_features: int, n: int) -> range:
    """The row counts for which PHMLinear, by default on CPU, takes the factored product: 2 to
    ``factored_crossover`` rows. One row by H is a matrix-vector product, bound by reading H, at
    about half the time of two rows; there the factored product (1/n of the bytes, five kernels) was
    up to 1.3x slower under 1M weights and at n = 2, even at 1M weights and n = 4 (it won only at
    1024 x 4096, by 1.5x to 3.8x: a larger map than any translation size's but `big`'s FFN)."""
    return range(2, factored_crossover(in_features, out_features, n) + 1)


def _rows_from_environment() -> Optional[int]:
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


def _bound_unchanged(key, factors) -> bool:
    """Whether ``factors`` are the tensors ``key`` was taken from, unwritten since: the same objects,
    pointing to the same memory in the same layout (``is_set_to``: same storage, offset, size and
    stride; the key holds an alias of that storage, so its memory cannot be reused meanwhile), and
    with the same version counts. Metadata only: no tensor is read or compared."""
    if len(key) != len(factors):
        return False
    for tensor, (bound, alias, version) in zip(factors, key):
        if tensor is not bound or not tensor.is_set_to(alias) or tensor._version != version:
            return False
    return True


def _cacheable(tensor: Tensor) -> bool:
    """Plain tensors whose writes the version counter counts: not an inference tensor (no counter),
    not a torch.func transform's wrapper (vmap, grad: they live for one call) or another subclass."""
    return type(tensor) in (Tensor, nn.Parameter) and not tensor.is_inference() and not _is_functorch_wrapper(tensor)


class PHMLinear(nn.Module):
    """Parameterized hypercomplex multiplication layer: an ``nn.Linear`` with 1/n of the weights.

    Args:
        in_features, out_features: as for ``nn.Linear``; both must be divisible by ``n``.
        n: number of Kronecker products (the hypercomplex dimension); n=1 is a dense layer.
        bias: learn an additive bias (of ``out_features``, not compressed).
        rule: "learned" (default), "algebra-init" or "algebra-frozen"; see ``RULES``.
        gain: the init targets the variance of ``nn.init.xavier_uniform_(W, gain)``.
        rank: None (default: each S_i is a full matrix, the Parameter ``S``) or R: each S_i is
            ``S_left[i] @ S_right[i]``, factors of (out_features/n, R) and (R, in_features/n).

    The arguments are checked by ``validation``, as ``LinearSpec`` checks a spec (the messages are
    the same wherever a layer is built). ``kronecker_factors()`` gives (A, S) with S built from
    its factors when low rank.

    ``weight`` is H, built on access; fairseq's attention reads it directly. In eval mode
    under ``torch.no_grad()`` H is built once and reused while the tensors it is built from are
    the ones bound and unwritten (``weight``; docs/layers.md says which writes it sees). A forward
    of few rows (decoding) skips H and multiplies by A and S directly, reading 1/n of the bytes
    (``kronecker_sum_linear``; see ``factored_max_rows``); both paths give F.linear(x, H, b).
    """

    __constants__ = ["in_features", "out_features", "n"]
    __jit_unused_properties__ = ["weight"]

    factored_max_rows: Optional[int] = _rows_from_environment()
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
    ) -> None:
        super().__init__()
        n, rank = check_phm_options(n, rule, rank)
        in_features, out_features = check_feature_sizes(in_features, out_features)
        check_layer_sizes(in_features, out_features, n, rank)
        factory = {"device": device, "dtype": dtype}
        self.in_features, self.out_features, self.n = in_features, out_features, n
        self.rule, self.gain, self.rank = rule, gain, rank
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
        self._weight_cache = None  # (H, the key of the tensors it was built from)
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

    def _reset_bias(self) -> None:
        if self.bias is not None:  # as nn.Linear does (0 without inputs)
            bound = 1.0 / math.sqrt(self.in_features) if self.in_features > 0 else 0.0
            nn.init.uniform_(self.bias, -bound, bound)

    def kronecker_factors(self) -> Tuple[Tensor, Tensor]:
        """(A, S) of H = sum_i A_i kron S_i; S is built from its factors when the layer is low rank."""
        if self.S is not None:
            return self.A, self.S
        return self.A, torch.matmul(self.S_left, self.S_right)

    def factor_tensors(self) -> Tuple[Tensor, ...]:
        """Every tensor that H is built from: A (possibly shared with other layers), S or its factors."""
        S = self.S  # (each attribute of a module costs about 1 us: the eval cache checks these per call)
        if S is not None:
            return self.A, S
        return self.A, self.S_left, self.S_right

    def build_weight(self) -> Tensor:
        """H (out_features, in_features), differentiable in A and S (or S's factors)."""
        A, S = self.kronecker_factors()
        return kronecker_sum(A, S)

    @property
    def weight(self) -> Tensor:
        if self.training or torch.is_grad_enabled() or torch.compiler.is_compiling():
            return self.build_weight()
        # Eval mode without gradients: H is reused while the tensors bound now (those the module
        # holds, or those torch.func.functional_call put in their place) are the ones it was built
        # from, unwritten since (_bound_unchanged); otherwise it is built again.
        factors = self.factor_tensors()
        cache = self._weight_cache
        if cache is not None and _bound_unchanged(cache[1], factors):
            return cache[0]
        weight = self.build_weight()
        if all(_cacheable(t) for t in factors):
            self._weight_cache = (weight, tuple((t, t.detach(), t._version) for t in factors))
        return weight

    def forward(self, input: Tensor) -> Tensor:
        if torch.jit.is_scripting():
            return F.linear(input, self.build_weight(), self.bias)
        if input.shape[:-1].numel() in self.factored_rows(input.device):
            S = self.S if self.S is not None else (self.S_left, self.S_right)
            return kronecker_sum_linear(input, self.A, S, self.bias)
        return F.linear(input, self.weight, self.bias)

    def factored_rows(self, device: torch.device | None = None) -> range:
        """The row counts (the product of the input's leading dims) that take the factored product;
        every other count takes the product with H."""
        if self.factored_max_rows is not None:
            return range(1, self.factored_max_rows + 1)
        if device is not None and device.type != "cpu":
            return range(0)  # the rule was measured on CPU only
        return factored_rows_rule(self.in_features, self.out_features, self.n)

    def clear_cache(self) -> None:
        """Drops the cached H: needed only after a write that no version counter sees (docs/layers.md)."""
        self._weight_cache = None

    # The key sees what these change; dropping the cache here frees H's memory at once, and the
    # train()/eval() switch is what keeps a usual training loop safe from the writes that no
    # version counter sees (fairseq's optimizers, fused kernels: docs/layers.md).
    def train(self, mode: bool = True):
        self.clear_cache()
        return super().train(mode)

    def _apply(self, fn, *args, **kwargs):
        self.clear_cache()
        return super()._apply(fn, *args, **kwargs)

    def _load_from_state_dict(self, *args, **kwargs):
        self.clear_cache()
        return super()._load_from_state_dict(*args, **kwargs)

    def __getstate__(self):
        # copies (copy.deepcopy, torch.save of the module) start with no cache
        return {**super().__getstate__(), "_weight_cache": None}

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
        return (
            f"in_features={self.in_features}, out_features={self.out_features}, n={self.n}, "
            f"rule={rule}, {f'rank={self.rank}, ' if self.rank is not None else ''}bias={self.bias is not None}, "
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
