"""What every classification task of the plugin shares: the data directory, labels, batches.

A data directory holds ``labels.txt`` (the label set, one a line, in a fixed order: label i is
class i), ``SPLIT.label`` (one label a line, aligned with the split's examples) and the inputs
as fairseq-preprocess writes them (``dict.txt``, ``SPLIT.bin``, ``SPLIT.idx``, in a subfolder
per input where there are several, all with one dictionary). A task says which inputs an example
has (``INPUTS``) and how they reach the model (``net_input``); the rest is here, and
``phm-evaluate`` scores any task built on this one.
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
    SortDataset,
    StripTokenDataset,
    data_utils,
)
from fairseq.tasks import LegacyFairseqTask

logger = logging.getLogger(__name__)


def read_lines(path: str) -> list:
    """The lines of a text file, split on "\\n" only: a stray "\\r" or a U+2028 inside a line is
    part of it, as in the files that data-prep writes. A final newline is optional."""
    with open(path, encoding="utf-8", newline="") as f:
        lines = f.read().split("\n")
    if lines[-1] == "":
        lines.pop()  # what follows the final newline is no line
    return lines


class ClassificationTask(LegacyFairseqTask):
    """A fairseq task whose targets are class indices into ``self.labels``.

    Subclasses set ``INPUTS`` (the subfolders of the data directory that hold an example's
    sentences, "" for the directory itself), ``DATA`` and ``PREPARE`` (what the directory is and
    how data-prep makes one, for the messages), and implement ``net_input``.
    """

    INPUTS = ("",)
    DATA = "a classification data directory"
    PREPARE = "bash data-prep/sva.sh"

    @classmethod
    def add_args(cls, parser):
        inputs = ", ".join(f"{part}/" for part in cls.INPUTS if part) or "dict.txt, SPLIT.bin/.idx"
        parser.add_argument(
            "data",
            metavar="DIR",
            help=f"data directory made by data-prep ({inputs}, SPLIT.label, labels.txt)",
        )

    def __init__(self, args, dictionary, labels):
        super().__init__(args)
        self.dictionary = dictionary
        self.labels = labels
        # Saved in checkpoints ("task_state"), so that a model is never scored against
        # labels in another order (see load_state_dict).
        self.state.add_factory("labels", lambda: list(self.labels))
        self.state.labels  # noqa: B018  (materialise it)

    @classmethod
    def setup_task(cls, args, **kwargs):
        data = args.data
        paths = [os.path.join(data, part, "dict.txt") for part in cls.INPUTS]
        for path in paths:
            if not os.path.isfile(path):
                raise FileNotFoundError(
                    f"{path} not found: {data} is not {cls.DATA} (make one with data-prep, e.g. "
                    f"{cls.PREPARE} --out {data})"
                )
        for path in paths[1:]:
            if not filecmp.cmp(paths[0], path, shallow=False):
                raise ValueError(f"{paths[0]} and {path} differ: {' and '.join(cls.INPUTS)} must share one dictionary")
        dictionary = Dictionary.load(paths[0])
        labels = cls.read_labels(data)
        logger.info(f"dictionary: {len(dictionary)} types; labels: {', '.join(labels)}")
        return cls(args, dictionary, labels)

    @staticmethod
    def read_labels(data_dir: str) -> list:
        path = os.path.join(data_dir, "labels.txt")
        if not os.path.isfile(path):
            raise FileNotFoundError(
                f"{path} not found: {data_dir} is not a classification data directory made by "
                f"data-prep (it needs labels.txt, the label set in its fixed order)"
            )
        labels, first_line = [], {}
        for number, line in enumerate(read_lines(path), start=1):
            label = line.strip()
            if not label:
                continue
            if label in first_line:
                raise ValueError(
                    f"{path}:{number}: label {label!r} again (it is on line {first_line[label]}); "
                    f"expected distinct labels, one a line"
                )
            first_line[label] = number
            labels.append(label)
        if len(labels) < 2:
            raise ValueError(f"{path}: expected two or more distinct labels, one a line; found {labels}")
        return labels

    def read_targets(self, split: str, expected: int) -> np.ndarray:
        """Class indices of ``SPLIT.label``; an unknown label is an error naming its line."""
        path = os.path.join(self.args.data, f"{split}.label")
        if not os.path.isfile(path):
            raise FileNotFoundError(f"{path} not found: the {split!r} split has no labels")
        index = {label: i for i, label in enumerate(self.labels)}
        targets = []
        for number, line in enumerate(read_lines(path), start=1):
            label = line.strip()
            if label not in index:
                raise ValueError(f"{path}:{number}: unknown label {label!r} (labels.txt has {', '.join(self.labels)})")
            targets.append(index[label])
        if len(targets) != expected:
            raise ValueError(f"{path} has {len(targets)} labels for {expected} examples")
        return np.array(targets, dtype=np.int64)

    def load_sentences(self, split: str, part: str = ""):
        """The token sequences of ``split`` (of the input in subfolder ``part``), without the
        end-of-sentence token that fairseq-preprocess appends."""
        path = os.path.join(self.args.data, part, split)
        dataset = data_utils.load_indexed_dataset(path, self.dictionary, combine=False)
        if dataset is None:
            raise FileNotFoundError(f"{path}.bin/.idx not found: the data directory has no {split!r} split")
        return StripTokenDataset(dataset, self.dictionary.eos())

    def net_input(self, sentences: dict) -> dict:
        """The batch's ``net_input`` datasets, from the sentences of each of ``INPUTS``."""
        raise NotImplementedError

    def load_dataset(self, split, epoch=1, combine=False, **kwargs):
        sentences = {part: self.load_sentences(split, part) for part in self.INPUTS}
        counts = {part: len(dataset) for part, dataset in sentences.items()}
        if len(set(counts.values())) > 1:
            raise ValueError(
                f"{split}: the inputs differ in length: "
                + ", ".join(f"{count} {part} sentences" for part, count in counts.items())
            )
        examples = counts[self.INPUTS[0]]
        sizes = np.maximum.reduce([dataset.sizes for dataset in sentences.values()])
        dataset = NestedDictionaryDataset(
            {
                "id": IdDataset(),
                "net_input": self.net_input(sentences),
                "target": RawLabelDataset(self.read_targets(split, examples)),
                "nsentences": NumSamplesDataset(),
                "ntokens": NumelDataset(ConcatSentencesDataset(*sentences.values()), reduce=True),
            },
            sizes=[sizes],
        )
        return self.set_dataset(split, dataset, sizes, epoch)

    def set_dataset(self, split: str, dataset, sizes: np.ndarray, epoch: int = 1):
        """Makes ``dataset`` the split, in batches of similar lengths (less padding), shuffled
        among equal lengths."""
        with data_utils.numpy_seed(self.args.seed, epoch):
            shuffle = np.random.permutation(len(dataset))
        self.datasets[split] = SortDataset(dataset, sort_order=[shuffle, sizes])
        logger.info(f"{split}: {len(dataset)} examples")
        return self.datasets[split]

    def load_state_dict(self, state_dict):
        saved = state_dict.get("labels")
        if saved is not None and list(saved) != list(self.labels):
            raise ValueError(
                f"the checkpoint was trained with the labels {list(saved)} (in this order), but "
                f"{self.args.data}/labels.txt has {self.labels}: use the data directory it was trained on"
            )
        super().load_state_dict(state_dict)

    def get_batch_iterator(self, *args, **kwargs):
        # fairseq's default --required-batch-size-multiple 8 silently drops the examples that do
        # not fill a multiple of 8 (in training and in evaluation): every example counts here.
        kwargs["required_batch_size_multiple"] = 1
        return super().get_batch_iterator(*args, **kwargs)

    def max_positions(self):
        return None  # the model's limit alone (none for recurrent encoders): nothing else is filtered out

    @property
    def source_dictionary(self):
        return self.dictionary

    @property
    def target_dictionary(self):
        return None
