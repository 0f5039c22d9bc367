"""fairseq's multi-head attention with its projections built by a ``LinearSpec``."""

import math

import torch.nn.functional as F
from fairseq.modules import MultiheadAttention
from torch import nn

from ..modules import LinearSpec, PHMLinear


class RowSlice(nn.Module):
    """Rows ``[start, start + size)`` of another layer: Q, K or V of a fused QKV projection.

    Owns no parameters; the source layer is registered once, on the attention module.
    """

    def __init__(self, source: nn.Module, start: int, size: int):
        super().__init__()
        self._source = (source,)  # a tuple keeps it out of this module's children
        self.start, self.size = start, size

    @property
    def weight(self):
        return self._source[0].weight[self.start : self.start + self.size]

    @property
    def bias(self):
        bias = self._source[0].bias
        return None if bias is None else bias[self.start : self.start + self.size]

    def forward(self, x):
        return F.linear(x, self.weight, self.bias)

    def extra_repr(self) -> str:
        return f"rows {self.start}:{self.start + self.size} of the fused projection"


class HypercomplexMultiheadAttention(MultiheadAttention):
    """``MultiheadAttention`` whose Q, K, V and output projections come from ``linear``.

    fairseq's forward reads ``q_proj.weight`` etc. and hands them to PyTorch's attention
    kernel; hypercomplex layers build that weight on access. With ``fused_qkv`` (self-attention
    only) one layer of output 3 x embed_dim computes Q, K and V, as Zhang et al. write it.
    Initialisation follows fairseq's: xavier-uniform with gain 1/sqrt(2) for Q, K, V when they
    share the input size, gain 1 and a zero bias for the output projection.
    """

    def __init__(self, embed_dim, num_heads, *, linear: LinearSpec, fused_qkv: bool = False, bias=True, **kwargs):
        super().__init__(embed_dim, num_heads, bias=bias, **kwargs)
        if fused_qkv and not self.self_attention:
            raise ValueError("fused_qkv needs self-attention: Q, K and V must share their input")
        qkv_gain = 1 / math.sqrt(2) if self.qkv_same_dim else 1.0
        if fused_qkv:
            self.qkv_proj = linear.build(embed_dim, 3 * embed_dim, bias=bias, gain=qkv_gain)
            self.q_proj, self.k_proj, self.v_proj = (
                RowSlice(self.qkv_proj, i * embed_dim, embed_dim) for i in range(3)
            )
        else:
            self.q_proj = linear.build(embed_dim, embed_dim, bias=bias, gain=qkv_gain)
            self.k_proj = linear.build(self.kdim, embed_dim, bias=bias, gain=qkv_gain)
            self.v_proj = linear.build(self.vdim, embed_dim, bias=bias, gain=qkv_gain)
        self.out_proj = linear.build(embed_dim, embed_dim, bias=bias)
        if bias:
            nn.init.zeros_(self.out_proj.bias)

    def reset_parameters(self):
        # fairseq's version writes xavier values into `.weight`, which for a hypercomplex layer
        # is a freshly built tensor: the write would be lost. Each layer re-initialises itself
        # to the same target instead (the gains were given to it when it was built).
        super().reset_parameters()
        for name in ("qkv_proj", "q_proj", "k_proj", "v_proj", "out_proj"):
            layer = getattr(self, name, None)
            if isinstance(layer, PHMLinear):
                layer.reset_parameters()
        if self.out_proj.bias is not None:
            nn.init.zeros_(self.out_proj.bias)
