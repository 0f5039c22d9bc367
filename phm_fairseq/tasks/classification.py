"""What every classification task of the plugin shares: labels, label files, complete batches.

A data directory holds ``labels.txt`` (the label set, one a line, in a fixed order: label i is
class i), ``SPLIT.label`` (one label a line, aligned with the split's examples) and the inputs
as fairseq-preprocess writes them (``dict.txt``, ``SPLIT.bin``, ``SPLIT.idx``, in a subfolder
per input where there are several). Subclasses assemble the batches; ``phm-evaluate`` scores
any task built on this one.
"""

import logging
import os

import numpy as np
from fairseq.data import SortDataset, StripTokenDataset, data_utils
from fairseq.tasks import LegacyFairseqTask

logger = logging.getLogger(__name__)


class ClassificationTask(LegacyFairseqTask):
    """A fairseq task whose targets are class indices into ``self.labels``."""

    def __init__(self, args, labels):
        super().__init__(args)
        self.labels = labels
        # Saved in checkpoints ("task_state"), so that a model is never scored against
        # labels in another order (see load_state_dict).
        self.state.add_factory("labels", lambda: list(self.labels))
        self.state.labels  # noqa: B018  (materialise it)

    @staticmethod
    def read_labels(data_dir: str) -> list:
        path = os.path.join(data_dir, "labels.txt")
        if not os.path.isfile(path):
            raise FileNotFoundError(
                f"{path} not found: {data_dir} is not a classification data directory made by "
                f"data-prep (it needs labels.txt, the label set in its fixed order)"
            )
        with open(path, encoding="utf-8") as f:
            labels = [line.strip() for line in f if line.strip()]
        if len(labels) < 2 or len(set(labels)) != len(labels):
            raise ValueError(f"{path}: expected two or more distinct labels, one a line; found {labels}")
        return labels

    def read_targets(self, split: str, expected: int) -> np.ndarray:
        """Class indices of ``SPLIT.label``; an unknown label is an error naming its line."""
        path = os.path.join(self.args.data, f"{split}.label")
        if not os.path.isfile(path):
            raise FileNotFoundError(f"{path} not found: the {split!r} split has no labels")
        index = {label: i for i, label in enumerate(self.labels)}
        targets = []
        with open(path, encoding="utf-8") as f:
            for number, line in enumerate(f, start=1):
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
