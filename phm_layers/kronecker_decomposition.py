"""The PHM weights nearest to a dense weight matrix (Van Loan & Pitsianis, 1993).

Split W (k, d) into n x n blocks of size (k/n, d/n) and rearrange it into R (n*n, (k/n)*(d/n)),
row r*n + c holding block (r, c) flattened. Block (r, c) of H = sum_i A_i kron S_i is
sum_i A_i[r, c] S_i, so H rearranges into sum_i vec(A_i) vec(S_i)^T: a matrix of rank <= n.
The H nearest to W in the Frobenius norm is therefore R's rank-n truncated SVD (Eckart-Young),
and ||W - H||_F^2 is the sum of the discarded sigma^2.

With A fixed (an algebra's rule: quaternion, complex, octonion, ...) what is left is linear
least squares in S; for an algebra rule every A_i is a signed permutation (one +-1 per block),
so S_i is the mean of W's blocks, each signed as A_i says.

A layer with an unshared term (H = sum_i A_i kron S_i + U V^T) is fitted greedily: the Kronecker
sum as above, then U V^T as the rank-r truncated SVD of what it leaves, W - sum_i A_i kron S_i.
"""

import math
from dataclasses import dataclass
from typing import Optional, Union

import torch
from torch import Tensor

from .functional import kronecker_sum
from .linear_spec import LinearSpec
from .phm_linear import PHMLinear


@dataclass(frozen=True)
class KroneckerFactors:
    """H = sum_i A_i kron S_i, fitted to a dense weight W."""

    A: Tensor  # (n, n, n)
    S: Tensor  # (n, k/n, d/n)
    relative_error: float  # ||W - H||_F / ||W||_F (0 for W = 0)

    @property
    def n(self) -> int:
        return self.A.shape[0]

    def weight(self) -> Tensor:
        """H (k, d)."""
        return kronecker_sum(self.A, self.S)


def rearrange(weight: Tensor, n: int) -> Tensor:
    """W (k, d) -> R (n*n, (k/n)*(d/n)), row r*n + c = block (r, c) of W, flattened."""
    k, d = weight.shape
    return weight.reshape(n, k // n, n, d // n).transpose(1, 2).reshape(n * n, (k // n) * (d // n))


def nearest_kronecker_sum(weight: Tensor, n: int) -> KroneckerFactors:
    """The sum of n Kronecker products nearest to ``weight`` (k, d) in the Frobenius norm.

    Computed in float64 and returned in ``weight``'s dtype. Exact (error at float precision)
    when W is such a sum; n = 1 gives A = 1, S = W for any W.

    The SVD fixes only the products A_i kron S_i. Every A_i is given the Frobenius norm
    sqrt(n) and S carries W's scale: that is an algebra rule's norm (n entries +-1) and, on
    average, PHMLinear's initialisation (a unit vector (A_1[r, c], ..., A_n[r, c]) per block),
    so A and S start at the scales that training from scratch gives them, and an optimizer
    step moves them as much as it would there. The singular vectors' signs are fixed so that
    the first largest entry of each A_i is positive, so that W and -W give the same A.
    Where singular values tie, the split among the tied terms is not unique, their sum is.
    """
    _check_weight(weight, n)
    R = rearrange(weight.detach().to(torch.float64), n)
    # A reduced SVD of R has min(n*n, (k/n)*(d/n)) terms; with fewer than n (tiny blocks) the
    # full U supplies the missing left vectors, which then get zero S.
    U, sigma, Vh = torch.linalg.svd(R, full_matrices=R.shape[1] < n)
    kept = min(n, sigma.numel())
    U = U[:, :n]
    V = R.new_zeros(n, R.shape[1])
    V[:kept] = sigma[:kept, None] * Vh[:kept]  # sigma_i v_i
    U, V = _fix_signs(U, V)
    scale = math.sqrt(n)
    A = (U.T * scale).reshape(n, n, n)
    S = (V / scale).reshape(n, weight.shape[0] // n, weight.shape[1] // n)
    total = sigma.square().sum()
    error = math.sqrt(sigma[kept:].square().sum() / total) if total > 0 else 0.0
    return KroneckerFactors(A.to(weight), S.to(weight), error)


def nearest_with_rule(weight: Tensor, A: Tensor) -> KroneckerFactors:
    """S minimising ||W - sum_i A_i kron S_i||_F for a fixed rule ``A`` (n, n, n), e.g. the
    quaternion (Hamilton) rule ``multiplication_rule(4)``: the least-squares component weights.

    For an algebra rule S_i is the mean of W's blocks, each signed as A_i says. For any A the
    solution is the least-squares one (of least norm where the A_i are linearly dependent).
    """
    if A.dim() != 3 or A.shape[0] != A.shape[1] or A.shape[1] != A.shape[2]:
        raise ValueError(f"a PHM rule A has shape (n, n, n), got {tuple(A.shape)}")
    n = A.shape[0]
    _check_weight(weight, n)
    R = rearrange(weight.detach().to(torch.float64), n)
    M = A.detach().to(R).reshape(n, n * n).T  # column i = vec(A_i)
    S = torch.linalg.pinv(M) @ R
    norm = R.norm()
    error = float((R - M @ S).norm() / norm) if norm > 0 else 0.0
    S = S.reshape(n, weight.shape[0] // n, weight.shape[1] // n)
    return KroneckerFactors(A.detach().to(weight), S.to(weight), error)


def load_kronecker_factors(layer: PHMLinear, factors: KroneckerFactors, bias: Optional[Tensor] = None) -> None:
    """Writes A, S and ``bias`` into a PHMLinear (or QuaternionLinear) in place.

    A layer whose rule is frozen keeps its A: the factors must have been fitted to that rule. A
    layer of rank R (S_i = S_left_i @ S_right_i) gets each S_i's nearest rank-R factors (its
    truncated SVD, the singular values split evenly between the two factors). A layer with
    normalised factors gets the term gains that give sum_i A_i kron S_i; one with an unshared
    term gets U = 0 (``fit_phm_layer`` fits it).
    """
    blocks = (layer.n, layer.out_features // layer.n, layer.in_features // layer.n)
    if factors.A.shape != layer.A.shape or tuple(factors.S.shape) != blocks:
        raise ValueError(
            f"factors with A {tuple(factors.A.shape)}, S {tuple(factors.S.shape)} do not fit "
            f"the layer {layer.in_features}->{layer.out_features} (n={layer.n}): A "
            f"{tuple(layer.A.shape)}, S {blocks}"
        )
    frozen = not isinstance(layer.A, torch.nn.Parameter)
    if frozen and not torch.equal(factors.A.to(layer.A), layer.A):
        raise ValueError(
            f"the layer's rule ({layer.rule}) is frozen and differs from the factors' A: fit "
            f"its S to that rule with nearest_with_rule(weight, layer.A)"
        )
    if (bias is None) != (layer.bias is None):
        raise ValueError(
            f"the layer {'has' if layer.bias is not None else 'has no'} bias, "
            f"but {'none' if bias is None else 'one'} was given"
        )
    with torch.no_grad():
        if not frozen:
            layer.A.copy_(factors.A)
        if layer.rank is None:
            layer.S.copy_(factors.S)
        else:
            left, right = _low_rank(factors.S, layer.rank)
            layer.S_left.copy_(left)
            layer.S_right.copy_(right)
        if bias is not None:
            layer.bias.copy_(bias)
        if layer.U is not None:
            layer.U.zero_()
    layer.reset_term_gains()
    if layer.merged:  # it computes with the factors just written
        layer.merge()


def _low_rank(S: Tensor, rank: int):
    """Factors (n, k, R) and (n, R, d) of each S_i's nearest rank-R matrix (zeros past its rank)."""
    U, sigma, Vh = torch.linalg.svd(S.double(), full_matrices=False)
    kept = min(rank, sigma.shape[-1])
    root = sigma[:, :kept].sqrt()
    left = S.new_zeros(S.shape[0], S.shape[1], rank, dtype=torch.float64)
    right = S.new_zeros(S.shape[0], rank, S.shape[2], dtype=torch.float64)
    left[:, :, :kept] = U[:, :, :kept] * root[:, None, :]
    right[:, :kept] = root[:, :, None] * Vh[:, :kept]
    return left.to(S), right.to(S)


class _LayersOwnBias:
    def __repr__(self) -> str:
        return "the layer's own"


_LAYERS_OWN_BIAS = _LayersOwnBias()


def fit_phm_layer(
    layer: PHMLinear, weight: Tensor, bias: Union[Tensor, None, _LayersOwnBias] = _LAYERS_OWN_BIAS
) -> KroneckerFactors:
    """Sets ``layer`` to the nearest it can be to the dense map x W^T + bias; returns its factors
    and how near it came (``relative_error``: ||W - H||_F / ||W||_F of the layer as set).

    ``bias`` left out, the layer keeps its own (none, if it has none): ``fit_phm_layer(layer, W)`` sets
    the weight alone, as a write into a dense layer's weight would. Given, the bias is the dense map's,
    and must match the layer's (``None``: the dense map has none, so neither may the layer).

    A learned rule takes the nearest Kronecker sum; any other rule (algebra-init, algebra-frozen,
    the quaternion layer) keeps the layer's A, the algebra's rule, and fits S to it. A low-rank
    layer then keeps each S_i's nearest rank-R matrix; a layer with an unshared term U V^T then
    fits it to what is left.
    """
    expected = (layer.out_features, layer.in_features)
    if tuple(weight.shape) != expected:
        raise ValueError(f"a weight of shape {tuple(weight.shape)} cannot be fitted into a layer of shape {expected}")
    if layer.rule == "learned":
        factors = nearest_kronecker_sum(weight, layer.n)
    else:
        factors = nearest_with_rule(weight, layer.A)
    if bias is _LAYERS_OWN_BIAS:
        bias = None if layer.bias is None else layer.bias.detach().clone()
    load_kronecker_factors(layer, factors, bias)
    if layer.rank is None and layer.U is None:
        return factors
    A, S = (t.detach() for t in layer.kronecker_factors())
    if layer.U is not None:
        _fit_unshared_term(layer, weight - kronecker_sum(A, S).to(weight))
    with torch.no_grad():
        fitted = layer.build_weight().double()
    norm = weight.double().norm()
    error = float((weight.double() - fitted).norm() / norm) if norm > 0 else 0.0
    return KroneckerFactors(A, S, error)


def _fit_unshared_term(layer: PHMLinear, residual: Tensor) -> None:
    """U V^T = the residual's rank-r truncated SVD (zeros past its rank), sqrt(sigma) in each factor."""
    U, sigma, Vh = torch.linalg.svd(residual.detach().double(), full_matrices=False)
    kept = min(layer.lowrank, sigma.numel())
    root = sigma[:kept].sqrt()
    with torch.no_grad():
        layer.U.zero_()
        layer.V.zero_()
        layer.U[:, :kept] = (U[:, :kept] * root).to(layer.U)
        layer.V[:, :kept] = (Vh[:kept].T * root).to(layer.V)
    if layer.merged:
        layer.merge()


def _check_weight(weight: Tensor, n: int) -> None:
    if weight.dim() != 2:
        raise ValueError(f"a weight matrix (out_features, in_features) is 2-D, got shape {tuple(weight.shape)}")
    LinearSpec("phm", n=n).check_layer(weight.shape[1], weight.shape[0])


def _fix_signs(U: Tensor, V: Tensor):
    """Flips each pair (u_i, v_i) so that the first of u_i's largest entries is positive."""
    magnitude = U.abs()
    # "largest" up to rounding, so that ties (an algebra rule's equal entries) break by position
    largest = magnitude >= magnitude.max(dim=0, keepdim=True).values * (1 - 1e-9)
    pivot = largest.to(torch.int8).argmax(dim=0)
    signs = torch.sign(U[pivot, torch.arange(U.shape[1])])
    signs[signs == 0] = 1
    return U * signs, V * signs[:, None]
