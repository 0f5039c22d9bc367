"""Natural language inference: a premise, a hypothesis and a label (Zhang et al., sec. 5.1).

Data directory (made by data-prep/*.sh):
    premise/{dict.txt, SPLIT.bin, SPLIT.idx}     hypothesis/{the same dict.txt, SPLIT.bin, SPLIT.idx}
    SPLIT.label                                  labels.txt (the label set in its fixed order)
"""

import filecmp
import logging
import os

import numpy as np
from fairseq.data import (
    ConcatSentencesDataset,
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


@register_task("nli")
class NLITask(ClassificationTask):
    """Sentence-pair classification; premise and hypothesis share one dictionary.

    Batches hold ``net_input = {premise, premise_lengths, hypothesis, hypothesis_lengths}``
    (right-padded, without the end-of-sentence token) and ``target`` (class indices).
    """

    @staticmethod
    def add_args(parser):
        parser.add_argument(
            "data", metavar="DIR",
            help="data directory made by data-prep (premise/, hypothesis/, SPLIT.label, labels.txt)",
        )

    def __init__(self, args, dictionary, labels):
        super().__init__(args, labels)
        self.dictionary = dictionary

    @classmethod
    def setup_task(cls, args, **kwargs):
        data = args.data
        paths = [os.path.join(data, part, "dict.txt") for part in ("premise", "hypothesis")]
        for path in paths:
            if not os.path.isfile(path):
                raise FileNotFoundError(
                    f"{path} not found: {data} is not an NLI data directory (make one with "
                    f"data-prep, e.g. bash data-prep/snli.sh --out {data})"
                )
        if not filecmp.cmp(*paths, shallow=False):
            raise ValueError(f"{paths[0]} and {paths[1]} differ: premise and hypothesis must share one dictionary")
        dictionary = Dictionary.load(paths[0])
        labels = cls.read_labels(data)
        logger.info(f"dictionary: {len(dictionary)} types; labels: {', '.join(labels)}")
        return cls(args, dictionary, labels)

    def load_dataset(self, split, epoch=1, combine=False, **kwargs):
        premise, hypothesis = self.load_sentences(split, "premise"), self.load_sentences(split, "hypothesis")
        if len(premise) != len(hypothesis):
            raise ValueError(f"{split}: {len(premise)} premises but {len(hypothesis)} hypotheses")
        pad = self.dictionary.pad()
        sizes = np.maximum(premise.sizes, hypothesis.sizes)
        dataset = NestedDictionaryDataset(
            {
                "id": IdDataset(),
                "net_input": {
                    "premise": RightPadDataset(premise, pad_idx=pad),
                    "premise_lengths": NumelDataset(premise, reduce=False),
                    "hypothesis": RightPadDataset(hypothesis, pad_idx=pad),
                    "hypothesis_lengths": NumelDataset(hypothesis, reduce=False),
                },
                "target": RawLabelDataset(self.read_targets(split, len(premise))),
                "nsentences": NumSamplesDataset(),
                "ntokens": NumelDataset(ConcatSentencesDataset(premise, hypothesis), reduce=True),
            },
            sizes=[sizes],
        )
        return self.set_dataset(split, dataset, sizes, epoch)
