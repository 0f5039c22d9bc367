"""Single-sentence classification, e.g. subject-verb agreement as number prediction (Zhang et al.,
sec. 5.4): a tokenized sentence (or sentence prefix) and a label.

Data directory (made by data-prep/sva.sh):
    dict.txt  SPLIT.bin  SPLIT.idx      fairseq-preprocess --only-source output
    SPLIT.label  labels.txt             the labels, and the label set in its fixed order

fairseq's own ``sentence_prediction`` task is built for RoBERTa: its criterion asks the model for
a named classification head, it prepends <s>, and it binarizes the labels into a dictionary
ordered by frequency. This task reads the plugin's classification format instead, so that any
model that maps the batch to logits trains with the ``classification`` criterion and is scored
by ``phm-evaluate``.
"""

import logging
import os

from fairseq.data import (
    Dictionary,
    IdDataset,
    NestedDictionaryDataset,
    NumelDataset,
    NumSamplesDataset,
    RawLabelDataset,
    RightPadDataset,
)
from fairseq.tasks import register_task

from .classification import ClassificationTask

logger = logging.getLogger(__name__)


@register_task("sentence_classification")
class SentenceClassificationTask(ClassificationTask):
    """Batches hold ``net_input = {src_tokens, src_lengths}`` (right-padded, without the
    end-of-sentence token) and ``target`` (class indices into labels.txt)."""

    @staticmethod
    def add_args(parser):
        parser.add_argument(
            "data", metavar="DIR", help="data directory made by data-prep (dict.txt, SPLIT.bin/.idx, SPLIT.label, labels.txt)",
        )

    def __init__(self, args, dictionary, labels):
        super().__init__(args, labels)
        self.dictionary = dictionary

    @classmethod
    def setup_task(cls, args, **kwargs):
        path = os.path.join(args.data, "dict.txt")
        if not os.path.isfile(path):
            raise FileNotFoundError(
                f"{path} not found: {args.data} is not a sentence classification data directory "
                f"(make one with data-prep, e.g. bash data-prep/sva.sh --out {args.data})"
            )
        dictionary = Dictionary.load(path)
        labels = cls.read_labels(args.data)
        logger.info(f"dictionary: {len(dictionary)} types; labels: {', '.join(labels)}")
        return cls(args, dictionary, labels)

    def load_dataset(self, split, epoch=1, combine=False, **kwargs):
        sentences = self.load_sentences(split)
        dataset = NestedDictionaryDataset(
            {
                "id": IdDataset(),
                "net_input": {
                    "src_tokens": RightPadDataset(sentences, pad_idx=self.dictionary.pad()),
                    "src_lengths": NumelDataset(sentences, reduce=False),
                },
                "target": RawLabelDataset(self.read_targets(split, len(sentences))),
                "nsentences": NumSamplesDataset(),
                "ntokens": NumelDataset(sentences, reduce=True),
            },
            sizes=[sentences.sizes],
        )
        return self.set_dataset(split, dataset, sentences.sizes, epoch)
