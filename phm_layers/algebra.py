"""Multiplication rules of the Cayley-Dickson algebras, as PHM ``A`` tensors.

The real numbers (n=1), complex numbers (2), quaternions (4), octonions (8) and
sedenions (16) are built from one another by the Cayley-Dickson construction
    (a, b) (c, d) = (a c - d* b,  d a + b c*),      (a, b)* = (a*, -b),
which with e1 = i, e2 = j, e3 = k gives Hamilton's rule i j = k for n = 4.

A hypercomplex layer multiplies a weight W = sum_i S_i e_i with an input
x = sum_c x_c e_c. Output component r is sum_{i,c} C[i, c, r] S_i x_c, where
C[a, b, :] are the coordinates of e_a e_b. In the PHM layout (block (r, c) of
H = sum_i A_i kron S_i is sum_i A_i[r, c] S_i) this is A_i[r, c] = C[i, c, r].
"""

from functools import lru_cache

import torch
from torch import Tensor

ALGEBRAS = {1: "real", 2: "complex", 4: "quaternion", 8: "octonion", 16: "sedenion"}


def _conjugate(x: Tensor) -> Tensor:
    return torch.cat([x[..., :1], -x[..., 1:]], dim=-1)


def _multiply(x: Tensor, y: Tensor) -> Tensor:
    """Cayley-Dickson product of coordinate vectors (..., n), n a power of two."""
    n = x.shape[-1]
    if n == 1:
        return x * y
    h = n // 2
    a, b = x[..., :h], x[..., h:]
    c, d = y[..., :h], y[..., h:]
    return torch.cat(
        [
            _multiply(a, c) - _multiply(_conjugate(d), b),
            _multiply(d, a) + _multiply(b, _conjugate(c)),
        ],
        dim=-1,
    )


def check_algebra_dim(n: int) -> None:
    if n not in ALGEBRAS:
        raise ValueError(
            f"there is no Cayley-Dickson algebra of dimension n={n}: algebra rules "
            f"exist for n in {sorted(ALGEBRAS)} ({', '.join(ALGEBRAS.values())}); "
            f"use rule='learned' for other n"
        )


@lru_cache(maxsize=None)
def _structure_constants(n: int) -> Tensor:
    check_algebra_dim(n)
    # on the CPU whatever the default device (e.g. `with torch.device("meta")`): the cache outlives it
    eye = torch.eye(n, dtype=torch.float64, device="cpu")
    # products[a, b] = e_a e_b, all n^2 products in one vectorised call
    return _multiply(eye[:, None, :].expand(n, n, n), eye[None, :, :].expand(n, n, n))


def structure_constants(n: int) -> Tensor:
    """C (n, n, n) with e_a e_b = sum_c C[a, b, c] e_c; entries are 0 or +-1."""
    return _structure_constants(n).clone()


def multiplication_rule(n: int) -> Tensor:
    """The PHM ``A`` (n, n, n) of the n-dimensional algebra: A[i, r, c] = C[i, c, r]."""
    return _structure_constants(n).permute(0, 2, 1).contiguous()
