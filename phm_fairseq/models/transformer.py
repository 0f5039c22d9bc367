"""PHM-Transformer (Zhang et al., 2021), Quaternion Transformer (Tay et al., 2019) and their
dense twin: fairseq's Transformer with every linear map of its layers from a LinearSpec.

Embeddings and the (tied) output projection stay dense, as in the paper.
"""

from dataclasses import dataclass

from fairseq.distributed import fsdp_wrap
from fairseq.models import MODEL_REGISTRY, register_model, register_model_architecture
from fairseq.models.transformer import (
    TransformerConfig,
    TransformerDecoderBase,
    TransformerEncoderBase,
    TransformerModel,
    base_architecture,
)
from fairseq.modules.checkpoint_activations import checkpoint_wrapper
from fairseq.modules.transformer_layer import TransformerDecoderLayerBase, TransformerEncoderLayerBase

from ..checkpoints import mark_plugin_checkpoint
from ..modules import LinearSpec
from .attention import HypercomplexMultiheadAttention
from .linear_args import add_linear_args, check_feature_sizes, linear_spec_from_args
from .quaternion_attention import QuaternionMultiheadAttention


@dataclass(frozen=True)
class TransformerLinearMaps:
    """How the linear maps of a Transformer layer are built."""

    attention: LinearSpec  # Q, K, V and output projections
    ffn: LinearSpec
    fused_qkv: bool = False  # self-attention: one projection to 3 x embed_dim, as the paper writes it
    quaternion_attention: bool = False  # Tay et al.'s Hamilton-product attention logits

    def build_attention(self, embed_dim, num_heads, self_attention=False, **kwargs):
        attention = QuaternionMultiheadAttention if self.quaternion_attention else HypercomplexMultiheadAttention
        return attention(
            embed_dim, num_heads, linear=self.attention, fused_qkv=self.fused_qkv and self_attention,
            self_attention=self_attention, **kwargs,
        )


class _HypercomplexLayer:
    """What encoder and decoder layers share: FFN maps from the spec, no pruning."""

    maps: TransformerLinearMaps
    __jit_ignored_attributes__ = ["maps"]  # a build-time recipe, not for TorchScript

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

    def build_self_attention(self, embed_dim, cfg):
        return self.maps.build_attention(
            embed_dim, cfg.encoder.attention_heads, self_attention=True,
            dropout=cfg.attention_dropout, xformers_att_config=cfg.encoder.xformers_att_config,
        )


class HypercomplexTransformerDecoderLayer(_HypercomplexLayer, TransformerDecoderLayerBase):
    def __init__(self, cfg, maps: TransformerLinearMaps, no_encoder_attn=False):
        self.maps = maps
        super().__init__(cfg, no_encoder_attn=no_encoder_attn)

    def build_self_attention(self, embed_dim, cfg, add_bias_kv=False, add_zero_attn=False):
        return self.maps.build_attention(
            embed_dim, cfg.decoder.attention_heads, self_attention=not cfg.cross_self_attention,
            dropout=cfg.attention_dropout, add_bias_kv=add_bias_kv, add_zero_attn=add_zero_attn,
            xformers_att_config=cfg.decoder.xformers_att_config,
        )

    def build_encoder_attention(self, embed_dim, cfg):
        return self.maps.build_attention(
            embed_dim, cfg.decoder.attention_heads, kdim=cfg.encoder.embed_dim,
            vdim=cfg.encoder.embed_dim, dropout=cfg.attention_dropout,
            encoder_decoder_attention=True, xformers_att_config=cfg.encoder.xformers_att_config,
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

    def build_encoder_layer(self, cfg):
        return _wrap(HypercomplexTransformerEncoderLayer(cfg, self.maps, return_fc=self.return_fc), cfg)


class HypercomplexTransformerDecoder(TransformerDecoderBase):
    __jit_ignored_attributes__ = ["maps"]

    def __init__(self, cfg, dictionary, embed_tokens, maps: TransformerLinearMaps, no_encoder_attn=False):
        self.maps = maps
        super().__init__(cfg, dictionary, embed_tokens, no_encoder_attn=no_encoder_attn)

    def build_decoder_layer(self, cfg, no_encoder_attn=False):
        return _wrap(HypercomplexTransformerDecoderLayer(cfg, self.maps, no_encoder_attn), cfg)


def add_hypercomplex_args(parser, kind: str) -> None:
    """The flags of a Transformer of ``kind`` ("dense", "phm" or "quaternion") beyond fairseq's own."""
    if kind == "phm":
        add_linear_args(parser)
    group = parser.add_argument_group("hypercomplex Transformer (phm-fairseq)")
    group.add_argument(
        "--qkv-projection", choices=["fused", "separate"],
        help="self-attention Q, K, V: one projection of output 3 x embed_dim split three "
             "ways (fused, as Zhang et al. write it) or three projections (separate)",
    )
    group.add_argument(
        "--dense-ffn", action="store_true",
        help="keep the feed-forward layers dense: only the attention projections are "
             "hypercomplex (the 'partial' variant of Tay et al.)",
    )
    if kind == "quaternion":
        group.add_argument(
            "--quaternion-attention", action="store_true",
            help="Tay et al.'s attention: four logit maps from the Hamilton product of Q and "
                 "K, one softmax each, each weighting its component of V",
        )


def linear_maps_from_args(cfg, kind: str) -> TransformerLinearMaps:
    spec = linear_spec_from_args(cfg, kind)
    return TransformerLinearMaps(
        attention=spec,
        ffn=LinearSpec() if getattr(cfg, "dense_ffn", False) else spec,
        fused_qkv=getattr(cfg, "qkv_projection", None) == "fused",
        quaternion_attention=getattr(cfg, "quaternion_attention", False),
    )


def check_hypercomplex_args(args, kind: str, sides=("encoder", "decoder")) -> TransformerLinearMaps:
    """The linear maps that the flags ask for, once every flag that they cannot honour has been
    refused with a message naming it (raised when the model is built, not deep inside a layer)."""
    _refuse_unsupported_flags(args)
    maps = linear_maps_from_args(args, kind)
    check_feature_sizes(maps.attention, {f"--{side}-embed-dim": getattr(args, f"{side}_embed_dim") for side in sides})
    check_feature_sizes(maps.ffn, {f"--{side}-ffn-embed-dim": getattr(args, f"{side}_ffn_embed_dim") for side in sides})
    if maps.quaternion_attention:
        for side in sides:
            dim, heads = getattr(args, f"{side}_embed_dim"), getattr(args, f"{side}_attention_heads")
            if dim % (4 * heads):
                raise ValueError(
                    f"--quaternion-attention gives every head a quarter of each quaternion "
                    f"component: --{side}-embed-dim {dim} must be a multiple of 4 x "
                    f"--{side}-attention-heads {heads}"
                )
    return maps


class HypercomplexTransformerModel(TransformerModel):
    """fairseq's ``transformer`` with the linear maps of its layers built as ``kind`` says."""

    kind = "dense"

    @classmethod
    def add_args(cls, parser):
        super().add_args(parser)
        add_hypercomplex_args(parser, cls.kind)

    @classmethod
    def build_model(cls, args, task):
        base_architecture(args)
        check_hypercomplex_args(args, cls.kind)
        mark_plugin_checkpoint(args)
        return super().build_model(args, task)

    @classmethod
    def build_encoder(cls, args, src_dict, embed_tokens):
        cfg = TransformerConfig.from_namespace(args)
        return HypercomplexTransformerEncoder(cfg, src_dict, embed_tokens, linear_maps_from_args(cfg, cls.kind))

    @classmethod
    def build_decoder(cls, args, tgt_dict, embed_tokens):
        cfg = TransformerConfig.from_namespace(args)
        return HypercomplexTransformerDecoder(
            cfg, tgt_dict, embed_tokens, linear_maps_from_args(cfg, cls.kind), no_encoder_attn=cfg.no_cross_attention
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


@register_model("phm_transformer")
class PHMTransformerModel(HypercomplexTransformerModel):
    """PHM-Transformer: every linear map of every layer is a PHM layer with 1/n of the weights."""

    kind = "phm"


@register_model("quaternion_transformer")
class QuaternionTransformerModel(HypercomplexTransformerModel):
    """Quaternion Transformer: Hamilton-product layers (1/4 of the weights) in every layer."""

    kind = "quaternion"


@register_model("dense_transformer")
class DenseTransformerModel(HypercomplexTransformerModel):
    """The twin of the above with dense (nn.Linear) maps: fairseq's Transformer, with the
    initialisation that the plugin gives every kind of linear map."""

    kind = "dense"


# --- architectures ------------------------------------------------------------------------
# Three sizes, each for every model: "iwslt" (IWSLT'14 de-en and ro-en in the paper: 2 layers,
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
ARCH_PREFIX = {"phm_transformer": "phm_transformer", "quaternion_transformer": "quaternion_transformer",
               "dense_transformer": "transformer_twin"}


def set_architecture_defaults(args, kind: str, size: dict, sides=("encoder", "decoder"), extra=None) -> None:
    """Fills in what the command line left unset: the kind's defaults, ``extra``, the ``size``
    of each side (layers, attention_heads, embed_dim, ffn_embed_dim), then fairseq's defaults."""
    defaults = {**KIND_DEFAULTS[kind], **(extra or {})}
    defaults.update({f"{side}_{key}": value for side in sides for key, value in size.items()})
    for key, value in defaults.items():
        setattr(args, key, getattr(args, key, value))
    base_architecture(args)


def _register(model_name: str, size: str, extra=None):
    kind = MODEL_REGISTRY[model_name].kind

    def architecture(args):
        set_architecture_defaults(args, kind, SIZES[size], extra=extra)

    suffix = "_partial" if extra and extra.get("dense_ffn") else ""
    name = f"{ARCH_PREFIX[model_name]}{suffix}_{size}"
    register_model_architecture(model_name, name)(architecture)
    if size == "base" and not suffix:  # the model's own name is its base architecture
        register_model_architecture(model_name, model_name)(architecture)


for _model in ARCH_PREFIX:
    for _size in SIZES:
        _register(_model, _size)
for _size in SIZES:
    _register("quaternion_transformer", _size, extra={"dense_ffn": True})
