"""PHM linear layer (Zhang et al., ICLR 2021) and the quaternion layer it generalises.

Layout follows ``nn.Linear``: ``y = x H^T + b`` with H of shape (out_features, in_features),
    H = sum_{i=1..n} A_i kron S_i,    A (n, n, n),   S (n, out_features/n, in_features/n),
so the layer has out*in/n + n^3 weights instead of out*in.
"""

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from .algebra import ALGEBRAS, check_algebra_dim, multiplication_rule

RULES = ("learned", "algebra-init", "algebra-frozen")
"""How A is obtained: learned from a random start; learned from the algebra's rule; the
algebra's rule, frozen (a buffer, not a parameter). Algebra rules need n in 1, 2, 4, 8, 16."""


def kronecker_sum(A: Tensor, S: Tensor) -> Tensor:
    """sum_i A_i kron S_i as one contraction, without materialising the (n, k, d) stack.

    Block (r, c) of the result is sum_i A[i, r, c] S_i.
    """
    n, k, d = S.shape
    return torch.einsum("irc,ipq->rpcq", A, S).reshape(n * k, n * d)


class PHMLinear(nn.Module):
    """Parameterized hypercomplex multiplication layer: an ``nn.Linear`` with 1/n of the weights.

    Args:
        in_features, out_features: as for ``nn.Linear``; both must be divisible by ``n``.
        n: number of Kronecker products (the hypercomplex dimension); n=1 is a dense layer.
        bias: learn an additive bias (of ``out_features``, not compressed).
        rule: "learned" (default), "algebra-init" or "algebra-frozen"; see ``RULES``.
        gain: the init targets the variance of ``nn.init.xavier_uniform_(W, gain)``.

    ``weight`` is H, built on access; fairseq's attention reads it directly. In eval mode
    under ``torch.no_grad()`` H is built once and reused until a parameter changes.
    """

    __constants__ = ["in_features", "out_features", "n"]
    __jit_unused_properties__ = ["weight"]

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
    ) -> None:
        super().__init__()
        _check_shape(in_features, out_features, n)
        if rule not in RULES:
            raise ValueError(f"unknown PHM rule {rule!r}: choose one of {', '.join(RULES)}")
        if rule != "learned":
            check_algebra_dim(n)
        factory = {"device": device, "dtype": dtype}
        self.in_features, self.out_features, self.n = in_features, out_features, n
        self.rule, self.gain = rule, gain
        self.S = nn.Parameter(torch.empty(n, out_features // n, in_features // n, **factory))
        if rule == "algebra-frozen":
            # A constant of the architecture, so not saved in checkpoints.
            self.register_buffer("A", torch.empty(n, n, n, **factory), persistent=False)
        else:
            self.A = nn.Parameter(torch.empty(n, n, n, **factory))
        self.bias = nn.Parameter(torch.empty(out_features, **factory)) if bias else None
        self._cached_weight = None
        self._cache_key = None
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
            bound = self.gain * math.sqrt(6.0 / (self.in_features + self.out_features))
            nn.init.uniform_(self.S, -bound, bound)
            self._reset_bias()

    def _reset_bias(self) -> None:
        if self.bias is not None:  # as nn.Linear does
            bound = 1.0 / math.sqrt(self.in_features)
            nn.init.uniform_(self.bias, -bound, bound)

    def build_weight(self) -> Tensor:
        """H (out_features, in_features), differentiable in A and S."""
        return kronecker_sum(self.A, self.S)

    @property
    def weight(self) -> Tensor:
        if self.training or torch.is_grad_enabled():
            return self.build_weight()
        # An optimizer step, load_state_dict or any in-place edit bumps a version counter,
        # assigning a new Parameter changes its identity; _apply and train() drop the cache.
        key = (self.A, self.S, self.A._version, self.S._version)
        if not self._cache_matches(key):
            self._cached_weight, self._cache_key = self.build_weight(), key
        return self._cached_weight

    def _cache_matches(self, key) -> bool:
        if self._cache_key is None:
            return False
        A, S, *versions = self._cache_key
        return A is key[0] and S is key[1] and versions == list(key[2:])

    def forward(self, input: Tensor) -> Tensor:
        if torch.jit.is_scripting():
            return F.linear(input, self.build_weight(), self.bias)
        return F.linear(input, self.weight, self.bias)

    def clear_cache(self) -> None:
        self._cached_weight = self._cache_key = None

    def train(self, mode: bool = True):
        self.clear_cache()
        return super().train(mode)

    def _apply(self, fn, *args, **kwargs):
        self.clear_cache()
        return super()._apply(fn, *args, **kwargs)

    def _load_from_state_dict(self, *args, **kwargs):
        self.clear_cache()
        return super()._load_from_state_dict(*args, **kwargs)

    def to_dense(self) -> nn.Linear:
        """An equivalent ``nn.Linear`` holding H, e.g. to run the model in stock fairseq."""
        dense = nn.Linear(
            self.in_features,
            self.out_features,
            bias=self.bias is not None,
            device=self.S.device,
            dtype=self.S.dtype,
        )
        with torch.no_grad():
            dense.weight.copy_(self.build_weight())
            if self.bias is not None:
                dense.bias.copy_(self.bias)
        return dense

    @property
    def dense_parameter_count(self) -> int:
        """Parameters of the ``nn.Linear`` this layer replaces."""
        return self.in_features * self.out_features + (
            self.out_features if self.bias is not None else 0
        )

    def extra_repr(self) -> str:
        params = sum(p.numel() for p in self.parameters(recurse=False))
        rule = self.rule if self.rule == "learned" else f"{self.rule} ({ALGEBRAS[self.n]})"
        return (
            f"in_features={self.in_features}, out_features={self.out_features}, n={self.n}, "
            f"rule={rule}, bias={self.bias is not None}, "
            f"params={params:,} ({params / self.dense_parameter_count:.3f}x dense)"
        )


class QuaternionLinear(PHMLinear):
    """Hamilton-product layer (Parcollet et al., ICLR 2019; Tay et al., ACL 2019).

    PHM with n=4 and A frozen to Hamilton's rule; S holds the component weights
    W_r, W_x, W_y, W_z, initialised with Parcollet et al.'s polar (quaternion) scheme.
    """

    def __init__(self, in_features, out_features, bias=True, gain=1.0, device=None, dtype=None):
        super().__init__(
            in_features, out_features, n=4, bias=bias, rule="algebra-frozen",
            gain=gain, device=device, dtype=dtype,
        )

    def reset_parameters(self) -> None:
        with torch.no_grad():
            self.A.copy_(multiplication_rule(4))
            # W = |W| (cos theta + u sin theta): |W| ~ sigma * chi(4), theta ~ U(-pi, pi),
            # u a uniform random unit pure quaternion. E|W|^2 = 4 sigma^2 spread over 4
            # components gives every entry of H the xavier variance 2 gain^2 / (in + out).
            sigma = self.gain / math.sqrt(2.0 * (self.in_features + self.out_features) / 4)
            shape = self.S.shape[1:]
            like = {"device": self.S.device, "dtype": self.S.dtype}
            modulus = sigma * torch.randn(4, *shape, **like).norm(dim=0)
            phase = torch.empty(shape, **like).uniform_(-math.pi, math.pi)
            axis = torch.randn(3, *shape, **like)
            axis = axis / axis.norm(dim=0, keepdim=True)
            self.S[0] = modulus * torch.cos(phase)
            self.S[1:] = modulus * torch.sin(phase) * axis
            self._reset_bias()


def _check_shape(in_features: int, out_features: int, n: int) -> None:
    if not isinstance(n, int) or n < 1:
        raise ValueError(f"PHM n must be a positive integer, got n={n!r}")
    if in_features % n or out_features % n:
        common = math.gcd(in_features, out_features)
        divisors = [m for m in range(1, common + 1) if common % m == 0]
        raise ValueError(
            f"PHM layer {in_features}->{out_features}: n={n} must divide both "
            f"in_features={in_features} and out_features={out_features}; "
            f"n can be one of {divisors}"
        )
