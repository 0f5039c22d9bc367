"""Transformer sentence classifiers: the encoder of the PHM-Transformer, Quaternion Transformer
or their dense twin, mean-pooled into one vector, and a dense output layer (Zhang et al.,
sec. 5.4, Table 5: subject-verb agreement as number prediction).

The encoder is the translation models' own (HypercomplexTransformerEncoder, built from the same
TransformerLinearMaps and flags). Pooling is the mean of its outputs over the real tokens: the
class-label top of tensor2tensor, on which the paper's Transformers were built, averages the
encoder outputs and applies one dense layer; here padding is left out of the mean, so a
prediction does not depend on the batch it is in. The output layer (features -> labels) stays
dense, like the translation models' output projection: 2 outputs are not divisible by n, and
Table 5 counts the encoder layers only.

One registered model (``hypercomplex_transformer_classifier``) whose kind of linear map is a flag
(``--linear-kind``); each architecture name (the table ARCHITECTURES) sets the kind.
"""

from fairseq.models import FairseqEncoderModel, register_model, register_model_architecture
from fairseq.models.transformer import TransformerConfig, TransformerModel, base_architecture

from phm_layers import LinearSpec, mean_pool

from ..tasks.sentence_classification import SentenceClassificationTask
from .task_check import require_task
from .transformer import (
    HypercomplexTransformerEncoder,
    add_hypercomplex_args,
    linear_maps_from_args,
    set_architecture_defaults,
)

TABLE5_SIZE = dict(layers=2, attention_heads=4, embed_dim=128, ffn_embed_dim=512)
"""Table 5's encoder (tensor2tensor's transformer_tiny): 396.5K parameters in its layers."""


@register_model("hypercomplex_transformer_classifier")
class TransformerClassifierModel(FairseqEncoderModel):
    """Classifier with a Transformer encoder whose linear maps are built as ``--linear-kind`` says:
    dense (nn.Linear maps, initialised as the plugin initialises every kind of map), phm (every
    linear map of its layers a PHM layer; --phm-n, default 4; one fused Q/K/V map per layer unless
    --qkv-projection separate) or quaternion (Hamilton-product maps; optionally
    --quaternion-attention; --dense-ffn or --dense-attention). Takes fairseq's Transformer flags (those of the encoder
    apply) and maps ``src_tokens, src_lengths`` to one logit per label."""

    def __init__(self, encoder: HypercomplexTransformerEncoder, output_layer):
        super().__init__(encoder)
        self.output_layer = output_layer

    @classmethod
    def add_args(cls, parser):
        TransformerModel.add_args(parser)
        add_hypercomplex_args(parser)

    @classmethod
    def build_model(cls, args, task):
        require_task(args, task, SentenceClassificationTask, "sentence_classification", "a sentence classifier")
        base_architecture(args)
        maps = linear_maps_from_args(args, sides=("encoder",))
        cfg = TransformerConfig.from_namespace(args)
        dictionary = task.source_dictionary
        embed_tokens = TransformerModel.build_embedding(cfg, dictionary, cfg.encoder.embed_dim)
        encoder = HypercomplexTransformerEncoder(cfg, dictionary, embed_tokens, maps)
        output_layer = LinearSpec("dense").build(cfg.encoder.embed_dim, len(task.labels))
        return maps.model_spec.finish_model(cls(encoder, output_layer), sides=(encoder,))

    def forward(self, src_tokens, src_lengths):
        encoded = self.encoder(src_tokens, src_lengths)
        states = encoded["encoder_out"][0].transpose(0, 1)  # (batch, time, features)
        return self.output_layer(mean_pool(states, encoded["encoder_padding_mask"][0]))


ARCHITECTURES = {  # --arch: linear kind; every one has Table 5's size
    "transformer_classifier": "dense",
    "phm_transformer_classifier": "phm",
    "quaternion_transformer_classifier": "quaternion",
}


def _table5_architecture(kind: str):
    def architecture(args):
        set_architecture_defaults(args, kind, TABLE5_SIZE, sides=("encoder",))

    return architecture


for _name, _kind in ARCHITECTURES.items():
    register_model_architecture("hypercomplex_transformer_classifier", _name)(_table5_architecture(_kind))
