"""The PHM product as functions: H = sum_i A_i kron S_i, and x H^T + b with or without building H.

``nn.Linear``'s layout: H is (out_features, in_features), A is (n, n, n) and S is (n, out/n, in/n).
"""

from typing import Optional, Tuple, Union

import torch
from torch import Tensor


def kronecker_sum(A: Tensor, S: Tensor) -> Tensor:
    """sum_i A_i kron S_i as one contraction, without materialising the (n, k, d) stack.

    Block (r, c) of the result is sum_i A[i, r, c] S_i.
    """
    n, k, d = S.shape
    return torch.einsum("irc,ipq->rpcq", A, S).reshape(n * k, n * d)


def factor_rms(factors: Tensor) -> Tensor:
    """The RMS of each ``factors[i]``, a vector of ``len(factors)`` (computed in float32 at least; a small
    epsilon keeps it and its gradient finite at zero, and an empty factor has the epsilon's root)."""
    wide = factors.float() if factors.dtype in (torch.float16, torch.bfloat16) else factors
    entries = 1
    for size in wide.shape[1:]:
        entries *= size
    return torch.sqrt(wide.square().flatten(1).sum(1) / max(entries, 1) + 1e-12)


def unit_rms(factors: Tensor) -> Tensor:
    """Each ``factors[i]`` divided by its RMS (``factor_rms``)."""
    return factors / factor_rms(factors).to(factors.dtype).view([-1] + [1] * (factors.dim() - 1))


def kronecker_sum_linear(
    input: Tensor, A: Tensor, S: Union[Tensor, Tuple[Tensor, Tensor]], bias: Optional[Tensor] = None
) -> Tensor:
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
