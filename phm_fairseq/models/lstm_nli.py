"""LSTM, quaternion LSTM and PHM-LSTM sentence encoders for NLI (Zhang et al., sec. 4.1 and 5.1).

premise, hypothesis -> one shared encoder (no cross-sentence attention): word vectors, LSTM,
[max ; mean] pooling over real tokens -> u, v -> MLP on [u; v; |u - v|; u * v] -> logits.
One registered model (``hypercomplex_lstm_nli``): the LSTM, quaternion LSTM and PHM-LSTM differ
only in the LinearSpec of the LSTM's gate maps (``--linear-kind``, set by each architecture name
of the table ARCHITECTURES).
"""

import logging

import torch
import torch.nn.functional as F
from fairseq.models import BaseFairseqModel, register_model, register_model_architecture
from fairseq.models.lstm import LSTMEncoder
from torch import nn

from phm_layers import GATE_LAYOUTS, HypercomplexLSTM, LinearSpec, max_mean_pool

from ..tasks.nli import NLITask
from .linear_args import add_linear_args, linear_spec_from_args
from .task_check import require_task
from .word_vectors import glove_embeddings

logger = logging.getLogger(__name__)

PAIR_FEATURES = {"concat": 2, "matching": 4}
"""How the sentence vectors u, v meet: [u; v], or [u; v; |u - v|; u * v] (Mou et al., 2016)."""


class SentenceEncoder(LSTMEncoder):
    """fairseq's LSTM encoder with the LSTM replaced by a HypercomplexLSTM; pools to one vector."""

    def __init__(
        self,
        dictionary,
        embed_tokens,
        embed_dim,
        hidden_size,
        num_layers,
        bidirectional,
        dropout,
        linear: LinearSpec,
        gate_layout: str,
    ):
        super().__init__(
            dictionary,
            embed_dim=embed_dim,
            hidden_size=hidden_size,
            num_layers=num_layers,
            dropout_in=dropout,
            dropout_out=dropout,
            bidirectional=bidirectional,
            left_pad=False,
            pretrained_embed=embed_tokens,
        )
        self.lstm = HypercomplexLSTM(
            embed_dim,
            hidden_size,
            linear,
            num_layers=num_layers,
            bidirectional=bidirectional,
            gate_layout=gate_layout,
            dropout=dropout if num_layers > 1 else 0.0,
        )

    def sentence_vectors(self, tokens, lengths):
        """(batch, 2 * output_units): max- and mean-pooled LSTM states, padding left out."""
        states, _, _, padding_mask = self.forward(tokens, lengths, enforce_sorted=False)
        return max_mean_pool(states.transpose(0, 1), padding_mask.t())


class PairClassifier(nn.Module):
    """Two hidden layers (ReLU, dropout) and an output layer over the pair's features."""

    def __init__(self, sentence_dim, hidden_dim, num_classes, dropout, features="matching"):
        super().__init__()
        dense = LinearSpec("dense")
        self.features = features
        self.hidden = nn.Sequential(
            dense.build(PAIR_FEATURES[features] * sentence_dim, hidden_dim),
            nn.ReLU(),
            nn.Dropout(dropout),
            dense.build(hidden_dim, hidden_dim),
            nn.ReLU(),
            nn.Dropout(dropout),
        )
        self.output = dense.build(hidden_dim, num_classes)

    def forward(self, u, v):
        pair = [u, v] if self.features == "concat" else [u, v, (u - v).abs(), u * v]
        return self.output(self.hidden(torch.cat(pair, dim=-1)))


@register_model("hypercomplex_lstm_nli")
class LSTMNLIModel(BaseFairseqModel):
    """NLI classifier with an LSTM encoder whose gate maps are built as ``--linear-kind`` says:
    dense (Table 1's LSTM row), quaternion (Hamilton products; Parcollet et al., 2019) or phm
    (PHM-LSTM, Zhang et al., 2021, sec. 4.1; needs --phm-n)."""

    def __init__(self, encoder: SentenceEncoder, classifier: PairClassifier):
        super().__init__()
        self.encoder, self.classifier = encoder, classifier

    @staticmethod
    def add_args(parser):
        parser.add_argument(
            "--encoder-embed-dim",
            type=int,
            metavar="D",
            help="encoder input size (word vectors of another size are projected to it)",
        )
        parser.add_argument("--encoder-hidden-size", type=int, metavar="H", help="LSTM hidden size")
        parser.add_argument("--encoder-layers", type=int, metavar="L", help="stacked LSTM layers")
        parser.add_argument("--encoder-bidirectional", action="store_true", help="bidirectional LSTM")
        parser.add_argument(
            "--gate-layout",
            choices=GATE_LAYOUTS,
            help="per-gate: a map per gate and input (default; Table 1's counts); fused: one map in -> 4H per input",
        )
        parser.add_argument(
            "--dropout",
            type=float,
            metavar="P",
            help="dropout of word vectors, LSTM outputs (and between layers) and the MLP",
        )
        parser.add_argument("--classifier-hidden-dim", type=int, metavar="D", help="MLP hidden size (two layers)")
        parser.add_argument(
            "--pair-features",
            choices=sorted(PAIR_FEATURES),
            help="matching: [u; v; |u-v|; u*v] (default); concat: [u; v]",
        )
        parser.add_argument(
            "--glove",
            metavar="FILE",
            help="GloVe-format word vectors (text or .gz, any size); without it, learned embeddings",
        )
        parser.add_argument(
            "--glove-trainable",
            action="store_true",
            help="fine-tune the GloVe vectors (they are fixed by default, as in the paper)",
        )
        add_linear_args(parser)

    @classmethod
    def build_model(cls, args, task):
        require_task(args, task, NLITask, "nli", "an NLI (sentence-pair classification) model")
        base_architecture(args)
        linear = linear_spec_from_args(
            args, {"--encoder-embed-dim": args.encoder_embed_dim, "--encoder-hidden-size": args.encoder_hidden_size}
        )
        dictionary = task.source_dictionary
        embed_tokens = None
        if args.glove:
            # A model loaded from a checkpoint knows the vectors' size and gets their values from
            # the checkpoint: the GloVe file need not be there any more.
            from_checkpoint = getattr(args, "glove_dim", None)
            embed_tokens = glove_embeddings(
                args.glove, dictionary, args.encoder_embed_dim, trainable=args.glove_trainable, dim=from_checkpoint
            )
            args.glove_dim = embed_tokens.embedding.embedding_dim
        encoder = SentenceEncoder(
            dictionary,
            embed_tokens,
            args.encoder_embed_dim,
            args.encoder_hidden_size,
            args.encoder_layers,
            args.encoder_bidirectional,
            args.dropout,
            linear,
            args.gate_layout,
        )
        classifier = PairClassifier(
            2 * encoder.output_units, args.classifier_hidden_dim, len(task.labels), args.dropout, args.pair_features
        )
        return linear.finish_model(cls(encoder, classifier), sides=(encoder,))

    def forward(self, premise, premise_lengths, hypothesis, hypothesis_lengths):
        # Both sentences in one recurrent pass: a batch of 2 x batch sequences, as wide as the
        # longest sentence (fairseq's LSTM encoder expects no all-padding columns).
        lengths = torch.cat([premise_lengths, hypothesis_lengths])
        width = int(lengths.max())
        pad = self.encoder.padding_idx
        tokens = torch.cat(
            [F.pad(s[:, :width], (0, width - min(width, s.size(1))), value=pad) for s in (premise, hypothesis)]
        )
        vectors = self.encoder.sentence_vectors(tokens, lengths)
        u, v = vectors.chunk(2)
        return self.classifier(u, v)

    def max_positions(self):
        return None


def base_architecture(args, kind: str = "dense"):
    """Appendix B.1 of the paper: 300-d input and hidden, one unidirectional LSTM, 300-d MLP."""
    args.linear_kind = getattr(args, "linear_kind", kind)
    args.encoder_embed_dim = getattr(args, "encoder_embed_dim", 300)
    args.encoder_hidden_size = getattr(args, "encoder_hidden_size", 300)
    args.encoder_layers = getattr(args, "encoder_layers", 1)
    args.encoder_bidirectional = getattr(args, "encoder_bidirectional", False)
    args.gate_layout = getattr(args, "gate_layout", "per-gate")
    args.dropout = getattr(args, "dropout", 0.1)
    args.classifier_hidden_dim = getattr(args, "classifier_hidden_dim", 300)
    args.pair_features = getattr(args, "pair_features", "matching")
    args.glove = getattr(args, "glove", None)
    args.glove_trainable = getattr(args, "glove_trainable", False)


ARCHITECTURES = {  # --arch: linear kind of the LSTM's gate maps; every one has Table 1's size
    "lstm_nli": "dense",
    "quaternion_lstm_nli": "quaternion",
    "phm_lstm_nli": "phm",
}


def _architecture(kind: str):
    def architecture(args):
        base_architecture(args, kind)

    return architecture


for _name, _kind in ARCHITECTURES.items():
    register_model_architecture("hypercomplex_lstm_nli", _name)(_architecture(_kind))
