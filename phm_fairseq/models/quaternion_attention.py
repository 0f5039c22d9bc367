"""Quaternion attention (Tay et al., ACL 2019) as a fairseq attention module."""

from typing import Dict, Optional, Tuple

import torch
from fairseq import utils
from torch import Tensor

from phm_layers import structure_constants

from .attention import HypercomplexMultiheadAttention


class QuaternionMultiheadAttention(HypercomplexMultiheadAttention):
    """Attention whose logits are the Hamilton product of quaternion queries and keys.

    Q, K and V are quaternion-valued: features are laid out component-major,
    [r | x | y | z], as the Hamilton-product layers produce them. Every head takes an equal
    share of each component, so the components of a head line up. For a head, the Hamilton
    product of query q_t and key k_s, summed over features, is a quaternion: its four
    components are four logit maps (T x S), each normalised by its own softmax and weighting
    its own component of V. The output keeps the component-major layout for the output
    projection. Masks, dropout and incremental decoding work as in fairseq's attention.
    """

    def __init__(self, embed_dim, num_heads, **kwargs):
        if kwargs.get("fused_qkv"):
            # one Hamilton product of output 3 x embed_dim: its rows for Q (or K, V) are not
            # [r | x | y | z] of a quaternion, so the components would not line up
            raise ValueError(
                "quaternion attention needs Q, K and V that are each a Hamilton product: a fused Q/K/V "
                "projection's rows for them mix quaternion components; build them separately (fused_qkv=False)"
            )
        super().__init__(embed_dim, num_heads, **kwargs)
        if self.head_dim % 4:
            raise ValueError(
                f"quaternion attention splits each head into 4 components: the head size "
                f"embed_dim/heads = {embed_dim}/{num_heads} = {self.head_dim} must be a multiple of 4"
            )
        if self.bias_k is not None or self.add_zero_attn:
            raise ValueError("quaternion attention does not support add_bias_kv or add_zero_attn")
        self.register_buffer("hamilton", None, persistent=False)
        self._set_hamilton()
        self.register_load_state_dict_post_hook(_set_hamilton_after_load)

    def _set_hamilton(self) -> None:
        # hamilton[a, b, c]: coefficient of e_c in e_a e_b. A constant, so in no checkpoint: set beside
        # the parameters when the module is made (on the meta device too), loaded or reset (to_empty()
        # leaves it uninitialised)
        self.hamilton = structure_constants(4).to(next(self.parameters()).device, torch.float32)

    def reset_parameters(self):
        super().reset_parameters()
        if "hamilton" in self._buffers:  # fairseq's __init__ resets before this module registers it
            self._set_hamilton()

    def _split(self, x: Tensor, length: int, batch: int) -> Tensor:
        """(length, batch, embed_dim) -> (batch * heads, 4, length, head_dim / 4)."""
        x = x.reshape(length, batch, 4, self.num_heads, self.head_dim // 4)
        return x.permute(1, 3, 2, 0, 4).reshape(batch * self.num_heads, 4, length, self.head_dim // 4)

    def _merge(self, x: Tensor, length: int, batch: int) -> Tensor:
        x = x.reshape(batch, self.num_heads, 4, length, self.head_dim // 4)
        return x.permute(3, 0, 2, 1, 4).reshape(length, batch, self.embed_dim)

    def _hamilton_logits(self, q: Tensor, k: Tensor) -> Tensor:
        """q (N, 4, T, d), k (N, 4, S, d) -> (N, 4, T, S): component c of sum_d q_t (x) k_s."""
        N, _, S, d = k.shape
        # component c = sum_{a,b} hamilton[a, b, c] q_a . k_b = q . (sum_b hamilton[a, b, c] k_b)
        k_mixed = torch.einsum("abc,nbsd->ncsad", self.hamilton.to(k.dtype), k).reshape(N, 4, S, 4 * d)
        q_flat = q.transpose(1, 2).reshape(N, 1, -1, 4 * d)  # (N, 1, T, 4d), components a-major
        return torch.matmul(q_flat, k_mixed.transpose(2, 3))

    def forward(
        self,
        query: Tensor,
        key: Optional[Tensor],
        value: Optional[Tensor],
        key_padding_mask: Optional[Tensor] = None,
        incremental_state: Optional[Dict[str, Dict[str, Optional[Tensor]]]] = None,
        need_weights: bool = True,
        static_kv: bool = False,
        attn_mask: Optional[Tensor] = None,
        before_softmax: bool = False,
        need_head_weights: bool = False,
    ) -> Tuple[Tensor, Optional[Tensor]]:
        if need_head_weights:
            need_weights = True
        tgt_len, bsz, embed_dim = query.size()
        saved_state: Optional[Dict[str, Optional[Tensor]]] = None
        if incremental_state is not None:
            saved_state = self._get_input_buffer(incremental_state)
            if saved_state is not None and "prev_key" in saved_state and static_kv:
                key = value = None  # encoder-side keys and values are cached

        q = self._split(self.q_proj(query) * self.scaling, tgt_len, bsz)
        k: Optional[Tensor] = None
        v: Optional[Tensor] = None
        if self.self_attention:
            k = self._split(self.k_proj(query), tgt_len, bsz)
            v = self._split(self.v_proj(query), tgt_len, bsz)
        elif key is not None and value is not None:
            k = self._split(self.k_proj(key), key.size(0), bsz)
            v = self._split(self.v_proj(value), value.size(0), bsz)

        if saved_state is not None:
            # saved as (batch, heads, 4, length, head_dim / 4): reorder_incremental_state
            # selects along the batch dimension like fairseq's own buffers
            shape = (bsz * self.num_heads, 4, -1, self.head_dim // 4)
            prev_key = saved_state.get("prev_key")
            prev_value = saved_state.get("prev_value")
            if prev_key is not None and prev_value is not None:
                if static_kv or k is None or v is None:
                    k, v = prev_key.reshape(shape), prev_value.reshape(shape)
                else:
                    k = torch.cat([prev_key.reshape(shape), k], dim=2)
                    v = torch.cat([prev_value.reshape(shape), v], dim=2)
            assert k is not None and v is not None
            key_padding_mask = QuaternionMultiheadAttention._append_prev_key_padding_mask(
                key_padding_mask=key_padding_mask,
                prev_key_padding_mask=saved_state.get("prev_key_padding_mask"),
                batch_size=bsz,
                src_len=k.size(2),
                static_kv=static_kv,
            )
            saved_state["prev_key"] = k.reshape(bsz, self.num_heads, 4, -1, self.head_dim // 4)
            saved_state["prev_value"] = v.reshape(bsz, self.num_heads, 4, -1, self.head_dim // 4)
            saved_state["prev_key_padding_mask"] = key_padding_mask
            assert incremental_state is not None
            incremental_state = self._set_input_buffer(incremental_state, saved_state)
        assert k is not None and v is not None
        src_len = k.size(2)

        logits = self._hamilton_logits(q, k)  # (bsz * heads, 4, tgt_len, src_len)
        if attn_mask is not None:
            logits = logits + attn_mask
        if key_padding_mask is not None and key_padding_mask.dim() > 0:
            logits = (
                logits.view(bsz, self.num_heads, 4, tgt_len, src_len)
                .masked_fill(key_padding_mask.view(bsz, 1, 1, 1, src_len).to(torch.bool), float("-inf"))
                .view(bsz * self.num_heads, 4, tgt_len, src_len)
            )
        if before_softmax:
            return logits, v

        probs = utils.softmax(logits, dim=-1, onnx_trace=self.onnx_trace).type_as(logits)
        out = torch.matmul(self.dropout_module(probs), v)  # each component weights its own V
        out = self.out_proj(self._merge(out, tgt_len, bsz))

        weights: Optional[Tensor] = None
        if need_weights:
            per_head = probs.view(bsz, self.num_heads, 4, tgt_len, src_len).mean(dim=2).transpose(1, 0)
            weights = per_head if need_head_weights else per_head.mean(dim=0)
        return out, weights


def _set_hamilton_after_load(module: QuaternionMultiheadAttention, incompatible_keys) -> None:
    module._set_hamilton()  # once the projections hold the loaded tensors (assign=True may move them)
