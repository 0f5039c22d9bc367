"""PHM-Transformer (Zhang et al., 2021), Quaternion Transformer (Tay et al., 2019) and their
dense twin: fairseq's Transformer with every linear map of its layers from a LinearSpec.

One registered model (``hypercomplex_transformer``) whose kind of linear map is a flag
(``--linear-kind``); every architecture name (the table ARCHITECTURES) sets the kind and the size.
Embeddings and the (tied) output projection stay dense, as in the paper.
"""

from contextvars import ContextVar
from dataclasses import dataclass
from typing import Optional

import torch
from fairseq.distributed import fsdp_wrap
from fairseq.models import register_model, register_model_architecture
from fairseq.models.transformer import (
    TransformerConfig,
    TransformerDecoderBase,
    TransformerEncoderBase,
    TransformerModel,
    base_architecture,
)
from fairseq.modules.checkpoint_activations import checkpoint_wrapper
from fairseq.modules.transformer_layer import TransformerDecoderLayerBase, TransformerEncoderLayerBase
from torch import nn

from phm_layers import LinearSpec

from .attention import HypercomplexMultiheadAttention
from .linear_args import add_linear_args, add_transformer_args, linear_spec_from_args
from .positions import set_positions_at_every_load
from .quaternion_attention import QuaternionMultiheadAttention
from .task_check import require_translation_task


@dataclass(frozen=True)
class TransformerLinearMaps:
    """How the linear maps of a Transformer layer are built."""

    attention: LinearSpec  # Q, K, V and output projections: the model's spec, or dense (--dense-attention)
    ffn: LinearSpec  # the same, or dense (--dense-ffn)
    fused_qkv: bool = False  # self-attention: one projection to 3 x embed_dim, as the paper writes it
    fused_qkv_init: str = "one-map"  # its variance: of the whole map, or of each third as its own map
    quaternion_attention: bool = False  # Tay et al.'s Hamilton-product attention logits
    residual_gates: bool = False  # PHYDI: every residual branch scaled by a learned scalar that starts at 0

    @property
    def model_spec(self) -> LinearSpec:
        """The model's spec (``finish_model``'s): that of the maps not kept dense."""
        return self.ffn if self.attention.kind == "dense" else self.attention

    def build_attention(self, embed_dim, num_heads, self_attention=False, **kwargs):
        attention = QuaternionMultiheadAttention if self.quaternion_attention else HypercomplexMultiheadAttention
        return attention(
            embed_dim,
            num_heads,
            linear=self.attention,
            fused_qkv=self.fused_qkv and self_attention,
            fused_qkv_init=self.fused_qkv_init,
            self_attention=self_attention,
            **kwargs,
        )


def gate_residual_branch(branch: nn.Module) -> None:
    """PHYDI (Mancanelli et al., MLSP 2023; ReZero's gate): ``branch``'s output, which a residual connection
    adds to its input, is multiplied by a learned scalar ``residual_gate`` that starts at 0, so that the
    layer starts as the identity (up to its post-norm). A forward hook, so that every kind of attention
    and feed-forward map, and fairseq's own forward, stay as they are."""
    branch.residual_gate = nn.Parameter(torch.zeros(()))
    branch.register_forward_hook(_scale_by_residual_gate)


def remove_residual_gate(branch: nn.Module) -> torch.Tensor:
    """Undoes ``gate_residual_branch``; returns the gate's value, for a caller to fold into the branch."""
    gate = branch.residual_gate.detach()
    del branch.residual_gate
    for key, hook in list(branch._forward_hooks.items()):
        if hook is _scale_by_residual_gate:
            del branch._forward_hooks[key]
    return gate


def _scale_by_residual_gate(branch, inputs, output):
    if isinstance(output, tuple):  # attention: (output, weights)
        return (branch.residual_gate * output[0], *output[1:])
    return branch.residual_gate * output


class _HypercomplexLayer:
    """What encoder and decoder layers share: FFN maps from the spec, no pruning, PHYDI's gates."""

    maps: TransformerLinearMaps
    __jit_ignored_attributes__ = ["maps"]  # a build-time recipe, not for TorchScript

    def _gate_residual_branches(self):
        if self.maps.residual_gates:
            for branch in (self.self_attn, getattr(self, "encoder_attn", None), self.fc2):
                if branch is not None:
                    gate_residual_branch(branch)

    def build_fc1(self, input_dim, output_dim, q_noise, qn_block_size):
        return self.maps.ffn.build(input_dim, output_dim)

    def build_fc2(self, input_dim, output_dim, q_noise, qn_block_size):
        return self.maps.ffn.build(input_dim, output_dim)

    def _prune_fc_layer(self, remove_index):
        raise NotImplementedError(
            "pruning FFN units assumes nn.Linear weights; a PHM or quaternion layer's weight is "
            "built from A and S and cannot lose rows. Prune the dense export instead "
            "(phm_fairseq.models.export.densify)"
        )


class HypercomplexTransformerEncoderLayer(_HypercomplexLayer, TransformerEncoderLayerBase):
    def __init__(self, cfg, maps: TransformerLinearMaps, return_fc=False):
        self.maps = maps  # read by the build_* hooks that the base constructor calls
        super().__init__(cfg, return_fc=return_fc)
        self._gate_residual_branches()

    def build_self_attention(self, embed_dim, cfg):
        return self.maps.build_attention(
            embed_dim,
            cfg.encoder.attention_heads,
            self_attention=True,
            dropout=cfg.attention_dropout,
            xformers_att_config=cfg.encoder.xformers_att_config,
        )


class HypercomplexTransformerDecoderLayer(_HypercomplexLayer, TransformerDecoderLayerBase):
    def __init__(self, cfg, maps: TransformerLinearMaps, no_encoder_attn=False):
        self.maps = maps
        super().__init__(cfg, no_encoder_attn=no_encoder_attn)
        self._gate_residual_branches()

    def build_self_attention(self, embed_dim, cfg, add_bias_kv=False, add_zero_attn=False):
        return self.maps.build_attention(
            embed_dim,
            cfg.decoder.attention_heads,
            self_attention=not cfg.cross_self_attention,
            dropout=cfg.attention_dropout,
            add_bias_kv=add_bias_kv,
            add_zero_attn=add_zero_attn,
            xformers_att_config=cfg.decoder.xformers_att_config,
        )

    def build_encoder_attention(self, embed_dim, cfg):
        return self.maps.build_attention(
            embed_dim,
            cfg.decoder.attention_heads,
            kdim=cfg.encoder.embed_dim,
            vdim=cfg.encoder.embed_dim,
            dropout=cfg.attention_dropout,
            encoder_decoder_attention=True,
            xformers_att_config=cfg.encoder.xformers_att_config,
        )


def _wrap(layer, cfg):
    # as fairseq's build_encoder_layer / build_decoder_layer do
    checkpoint = cfg.checkpoint_activations
    if checkpoint:
        layer = checkpoint_wrapper(layer, offload_to_cpu=cfg.offload_activations)
    # if we are checkpointing, enforce that FSDP always wraps the checkpointed layer
    return fsdp_wrap(layer, min_num_params=cfg.min_params_to_wrap if not checkpoint else 0)


class HypercomplexTransformerEncoder(TransformerEncoderBase):
    __jit_ignored_attributes__ = ["maps"]

    def __init__(self, cfg, dictionary, embed_tokens, maps: TransformerLinearMaps):
        self.maps = maps
        super().__init__(cfg, dictionary, embed_tokens)
        set_positions_at_every_load(self)

    def build_encoder_layer(self, cfg):
        return _wrap(HypercomplexTransformerEncoderLayer(cfg, self.maps, return_fc=self.return_fc), cfg)


class HypercomplexTransformerDecoder(TransformerDecoderBase):
    __jit_ignored_attributes__ = ["maps"]

    def __init__(self, cfg, dictionary, embed_tokens, maps: TransformerLinearMaps, no_encoder_attn=False):
        self.maps = maps
        super().__init__(cfg, dictionary, embed_tokens, no_encoder_attn=no_encoder_attn)
        set_positions_at_every_load(self)

    def build_decoder_layer(self, cfg, no_encoder_attn=False):
        return _wrap(HypercomplexTransformerDecoderLayer(cfg, self.maps, no_encoder_attn), cfg)


def add_hypercomplex_args(parser) -> None:
    """The flags of the plugin's Transformers beyond fairseq's own."""
    add_linear_args(parser)
    add_transformer_args(parser)


def linear_maps_from_args(args, sides=("encoder", "decoder")) -> TransformerLinearMaps:
    """The linear maps that the flags ask for, once every flag that they cannot honour has been
    refused with a message naming it (raised when the model is built, not deep inside a layer)."""
    _refuse_unsupported_flags(args)
    dense_ffn, dense_attention = getattr(args, "dense_ffn", False), getattr(args, "dense_attention", False)
    sizes = {f"--{side}-embed-dim": getattr(args, f"{side}_embed_dim") for side in sides}
    if not dense_ffn:
        sizes.update({f"--{side}-ffn-embed-dim": getattr(args, f"{side}_ffn_embed_dim") for side in sides})
    spec = linear_spec_from_args(args, sizes)
    if dense_attention:
        _check_dense_attention(args, spec, dense_ffn)
    maps = TransformerLinearMaps(
        attention=LinearSpec() if dense_attention else spec,
        ffn=LinearSpec() if dense_ffn else spec,
        fused_qkv=getattr(args, "qkv_projection", None) == "fused",
        fused_qkv_init=getattr(args, "fused_qkv_init", None) or "one-map",
        quaternion_attention=getattr(args, "quaternion_attention", False),
        residual_gates=getattr(args, "phydi", False),
    )
    if getattr(args, "fused_qkv_init", None) is not None and not maps.fused_qkv:
        raise ValueError(
            f"--fused-qkv-init {args.fused_qkv_init} initialises the fused Q, K, V projection, and this model "
            f"projects Q, K and V separately (--qkv-projection {getattr(args, 'qkv_projection', None)}), each at "
            f"fairseq's own variance: leave it out, or pass --qkv-projection fused"
        )
    if maps.quaternion_attention:
        _check_quaternion_attention(args, maps, sides)
    return maps


def _check_dense_attention(args, spec: LinearSpec, dense_ffn: bool) -> None:
    if spec.kind == "dense":
        raise ValueError(
            "--dense-attention keeps the attention of a PHM or quaternion model dense, and this model is dense "
            "(--linear-kind dense): every map is dense already; leave it out"
        )
    if dense_ffn:
        raise ValueError(
            "--dense-attention with --dense-ffn: every map would be dense, the dense twin (transformer_twin_*); "
            "keep one of them"
        )
    for flag, given in (
        ("--quaternion-attention", getattr(args, "quaternion_attention", False)),
        ("--phm-shared-rule qkv", getattr(args, "phm_shared_rule", None) == "qkv"),
    ):
        if given:
            raise ValueError(f"{flag} concerns hypercomplex Q, K and V maps, and --dense-attention keeps them dense")


def _check_quaternion_attention(args, maps: TransformerLinearMaps, sides) -> None:
    if maps.attention.kind != "quaternion":
        raise ValueError(
            f"--quaternion-attention is an option of quaternion models, and this model is {maps.attention.kind} "
            f"(--linear-kind {maps.attention.kind}): leave it out, or use a quaternion_transformer_* architecture"
        )
    if maps.fused_qkv:
        raise ValueError(
            "--quaternion-attention with --qkv-projection fused: the attention needs Q, K and V that are each a "
            "Hamilton product, but the fused projection is one Hamilton product of output 3 x embed_dim, whose "
            "rows for Q, K and V each mix quaternion components, so the attention would multiply misaligned "
            "components. Pass --qkv-projection separate (the quaternion architectures' default)"
        )
    for side in sides:
        dim, heads = getattr(args, f"{side}_embed_dim"), getattr(args, f"{side}_attention_heads")
        if dim % (4 * heads):
            raise ValueError(
                f"--quaternion-attention gives every head a quarter of each quaternion "
                f"component: --{side}-embed-dim {dim} must be a multiple of 4 x "
                f"--{side}-attention-heads {heads}"
            )


def _refuse_unsupported_flags(args):
    for flag, value in (
        ("--quant-noise-pq", getattr(args, "quant_noise_pq", 0)),
        ("--quant-noise-scalar", getattr(args, "quant_noise_scalar", 0)),
    ):
        if value:
            raise ValueError(
                f"{flag} {value}: quantization noise replaces blocks of nn.Linear weights, but "
                f"PHM and quaternion layers build their weight from A and S, so it cannot be "
                f"honoured. Train without {flag}."
            )


@register_model("hypercomplex_transformer")
class HypercomplexTransformerModel(TransformerModel):
    """fairseq's ``transformer`` with the linear maps of its layers built as ``--linear-kind`` says:
    PHM-Transformer (phm), Quaternion Transformer (quaternion) or their dense twin (dense)."""

    @classmethod
    def add_args(cls, parser):
        super().add_args(parser)
        add_hypercomplex_args(parser)

    @classmethod
    def build_model(cls, args, task):
        """fairseq's, with the linear maps decided once from the flags (``linear_maps_from_args``) and
        handed to the encoder and the decoder, which fairseq's build_model builds through
        ``build_encoder`` and ``build_decoder`` (``_building``: the maps for the duration of the call)."""
        require_translation_task(args, task)
        base_architecture(args)
        maps = linear_maps_from_args(args)
        building = _building.set(maps)
        try:
            model = super().build_model(args, task)
        finally:
            _building.reset(building)
        return maps.model_spec.finish_model(model, sides=(model.encoder, model.decoder))

    @classmethod
    def build_encoder(cls, args, src_dict, embed_tokens):
        cfg = TransformerConfig.from_namespace(args)
        maps = _building.get() or linear_maps_from_args(args)
        return HypercomplexTransformerEncoder(cfg, src_dict, embed_tokens, maps)

    @classmethod
    def build_decoder(cls, args, tgt_dict, embed_tokens):
        cfg = TransformerConfig.from_namespace(args)
        maps = _building.get() or linear_maps_from_args(args)
        return HypercomplexTransformerDecoder(cfg, tgt_dict, embed_tokens, maps, no_encoder_attn=cfg.no_cross_attention)


_building: ContextVar[Optional[TransformerLinearMaps]] = ContextVar("phm_transformer_maps", default=None)
"""The maps of the model that ``build_model`` is building, for its ``build_encoder`` and ``build_decoder``
(called by fairseq's build_model, which hands them only the flags); outside it (a caller of those alone),
the maps are made from the flags."""


# --- architectures ------------------------------------------------------------------------
# Three sizes, each for every kind: "iwslt" (IWSLT'14 de-en and ro-en in the paper: 2 layers,
# 4 heads, hidden 256), "base" (the other pairs and style transfer: 4 layers, 8 heads, hidden
# 512) and "demo" (the Multi30k demo on CPU). FFN sizes are 4 x hidden, as tensor2tensor's
# transformer_small and transformer_base that the paper's code builds on.

SIZES = {
    "iwslt": dict(layers=2, attention_heads=4, embed_dim=256, ffn_embed_dim=1024),
    "base": dict(layers=4, attention_heads=8, embed_dim=512, ffn_embed_dim=2048),
    "demo": dict(layers=2, attention_heads=4, embed_dim=128, ffn_embed_dim=512),
}
KIND_DEFAULTS = {
    "phm": dict(phm_n=4, phm_rule="learned", qkv_projection="fused"),  # the paper's formulation
    "quaternion": dict(qkv_projection="separate"),
    "dense": dict(qkv_projection="separate"),
}
PARTIAL = dict(dense_ffn=True)  # Tay et al.'s partial Quaternion Transformer: hypercomplex attention only
ARCHITECTURES = {  # --arch: (linear kind, size, further defaults)
    "phm_transformer": ("phm", "base", {}),
    "phm_transformer_iwslt": ("phm", "iwslt", {}),
    "phm_transformer_base": ("phm", "base", {}),
    "phm_transformer_demo": ("phm", "demo", {}),
    "quaternion_transformer": ("quaternion", "base", {}),
    "quaternion_transformer_iwslt": ("quaternion", "iwslt", {}),
    "quaternion_transformer_base": ("quaternion", "base", {}),
    "quaternion_transformer_demo": ("quaternion", "demo", {}),
    "quaternion_transformer_partial_iwslt": ("quaternion", "iwslt", PARTIAL),
    "quaternion_transformer_partial_base": ("quaternion", "base", PARTIAL),
    "quaternion_transformer_partial_demo": ("quaternion", "demo", PARTIAL),
    "dense_transformer": ("dense", "base", {}),
    "transformer_twin_iwslt": ("dense", "iwslt", {}),
    "transformer_twin_base": ("dense", "base", {}),
    "transformer_twin_demo": ("dense", "demo", {}),
}


def set_architecture_defaults(args, kind: str, size: dict, sides=("encoder", "decoder"), extra=None) -> None:
    """Fills in what the command line (or a checkpoint) left unset: the linear kind, the defaults
    of the kind in effect (the architecture's, unless --linear-kind says otherwise), ``extra``,
    the ``size`` of each side (layers, attention_heads, embed_dim, ffn_embed_dim), then fairseq's."""
    args.linear_kind = getattr(args, "linear_kind", kind)
    defaults = {**KIND_DEFAULTS[args.linear_kind], **(extra or {})}
    defaults.update({f"{side}_{key}": value for side in sides for key, value in size.items()})
    for key, value in defaults.items():
        setattr(args, key, getattr(args, key, value))
    base_architecture(args)


def _architecture(kind: str, size: str, extra: dict):
    def architecture(args):
        set_architecture_defaults(args, kind, SIZES[size], extra=extra)

    return architecture


for _name, (_kind, _size, _extra) in ARCHITECTURES.items():
    register_model_architecture("hypercomplex_transformer", _name)(_architecture(_kind, _size, _extra))
