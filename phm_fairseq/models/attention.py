"""fairseq's multi-head attention with its projections built by a ``LinearSpec``."""

import math

from fairseq.modules import MultiheadAttention
from torch import nn

from phm_layers import LinearSpec, PHMLinear


class FusedProduct:
    """What the Q, K and V slices of one fused projection share during an attention forward: H,
    built at most once, and the 3 x embed_dim output for the input that Q, K and V are computed
    from (fairseq asks q_proj, k_proj and v_proj for it one after the other)."""

    def __init__(self, layer: nn.Module):
        self.layer = layer
        self.active = False
        self.clear()

    def clear(self):
        self.weight = self.input = self.output = None

    def __enter__(self):
        self.active = True
        return self

    def __exit__(self, *exc):
        self.active = False
        self.clear()

    def get_weight(self):
        if not self.active:
            return self._layer_weight()
        if self.weight is None:
            self.weight = self._layer_weight()
        return self.weight

    def _layer_weight(self):
        # as the layer's own forward computes with it: a merged layer's H itself, not a copy
        current = getattr(self.layer, "current_weight", None)
        return self.layer.weight if current is None else current()

    def get_output(self, x):
        if not self.active:
            return self.layer(x)
        if self.input is not x:
            self.input, self.output = x, self.layer(x)
        return self.output


class RowSlice(nn.Module):
    """Rows ``[start, start + size)`` of a fused projection: Q, K or V.

    Owns no parameters; the fused layer is registered once, on the attention module.
    """

    def __init__(self, fused: FusedProduct, start: int, size: int):
        super().__init__()
        self._fused = (fused,)  # a tuple keeps it out of this module's attributes that torch walks
        self.start, self.size = start, size

    # narrow(), not [start:end]: the same view, and one that fake CUDA tensors take in a CPU-only PyTorch
    @property
    def weight(self):
        return self._fused[0].get_weight().narrow(0, self.start, self.size)

    @property
    def bias(self):
        bias = self._fused[0].layer.bias
        return None if bias is None else bias.narrow(0, self.start, self.size)

    def forward(self, x):
        return self._fused[0].get_output(x).narrow(-1, self.start, self.size)

    def extra_repr(self) -> str:
        return f"rows {self.start}:{self.start + self.size} of the fused projection"


FUSED_QKV_INITS = ("one-map", "per-projection")
"""How a fused Q, K, V layer is initialised: as the one d -> 3d map it is, or each third as a d -> d map."""


class HypercomplexMultiheadAttention(MultiheadAttention):
    """``MultiheadAttention`` whose Q, K, V and output projections come from ``linear``.

    fairseq's forward reads ``q_proj.weight`` etc. and hands them to PyTorch's attention
    kernel; hypercomplex layers build that weight on access. With ``fused_qkv`` (self-attention
    only) one layer of output 3 x embed_dim computes Q, K and V, as Zhang et al. write it.
    Initialisation follows fairseq's: xavier-uniform with gain 1/sqrt(2) for Q, K, V when they
    share the input size, gain 1 and a zero bias for the output projection. The fused layer takes
    xavier's variance of its whole shape (``fused_qkv_init="one-map"``), half of what fairseq
    gives each projection, or each third that of a projection of its own ("per-projection").
    """

    def __init__(
        self,
        embed_dim,
        num_heads,
        *,
        linear: LinearSpec,
        fused_qkv: bool = False,
        fused_qkv_init: str = "one-map",
        bias=True,
        **kwargs,
    ):
        super().__init__(embed_dim, num_heads, bias=bias, **kwargs)
        if fused_qkv and not self.self_attention:
            raise ValueError("fused_qkv needs self-attention: Q, K and V must share their input")
        if fused_qkv_init not in FUSED_QKV_INITS:
            raise ValueError(f"unknown fused_qkv_init {fused_qkv_init!r}: choose one of {', '.join(FUSED_QKV_INITS)}")
        qkv_gain = 1 / math.sqrt(2) if self.qkv_same_dim else 1.0
        if fused_qkv:
            if fused_qkv_init == "per-projection":
                # xavier's variance 2 gain^2 / (fan_in + fan_out) over the d -> 3d map is (2d) / (4d) of
                # what each d -> d projection gets; this gain gives every third the projection's own.
                qkv_gain *= math.sqrt((embed_dim + 3 * embed_dim) / (embed_dim + embed_dim))
            self.fused_qkv_gain = qkv_gain
            self.qkv_proj = linear.build(embed_dim, 3 * embed_dim, bias=bias, gain=qkv_gain)
            self._qkv = FusedProduct(self.qkv_proj)
            self.q_proj, self.k_proj, self.v_proj = (RowSlice(self._qkv, i * embed_dim, embed_dim) for i in range(3))
        else:
            self.q_proj = linear.build(embed_dim, embed_dim, bias=bias, gain=qkv_gain)
            self.k_proj = linear.build(self.kdim, embed_dim, bias=bias, gain=qkv_gain)
            self.v_proj = linear.build(self.vdim, embed_dim, bias=bias, gain=qkv_gain)
        self.out_proj = linear.build(embed_dim, embed_dim, bias=bias)
        if bias:
            nn.init.zeros_(self.out_proj.bias)

    def reset_parameters(self):
        # fairseq's version writes xavier values into `.weight`, which a hypercomplex layer builds
        # from its factors and refuses to have written. Each layer re-initialises itself to the
        # same target instead (the gains were given to it when it was built).
        projections = [getattr(self, name, None) for name in ("qkv_proj", "q_proj", "k_proj", "v_proj", "out_proj")]
        hypercomplex = [layer for layer in projections if isinstance(layer, PHMLinear)]
        if not hypercomplex:  # fairseq's own layers (its __init__ calls this before ours exist) or dense ones
            super().reset_parameters()
            if hasattr(self, "qkv_proj"):  # fairseq's wrote each third at a projection's variance: the fused gain's
                nn.init.xavier_uniform_(self.qkv_proj.weight, gain=self.fused_qkv_gain)
            return
        for layer in hypercomplex:
            layer.reset_parameters()
        if self.out_proj.bias is not None:
            nn.init.zeros_(self.out_proj.bias)
        for bias in (self.bias_k, self.bias_v):
            if bias is not None:
                nn.init.xavier_normal_(bias)

    def forward(self, query, *args, **kwargs):
        if not hasattr(self, "_qkv"):
            return super().forward(query, *args, **kwargs)
        with self._qkv:  # one H per training forward, one 3 x embed_dim product per decoding step
            return super().forward(query, *args, **kwargs)
