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

from fairseq.data import NumelDataset, RightPadDataset
from fairseq.tasks import register_task

from .classification import ClassificationTask


@register_task("sentence_classification")
class SentenceClassificationTask(ClassificationTask):
    """Batches hold ``net_input = {src_tokens, src_lengths}`` (right-padded, without the
    end-of-sentence token) and ``target`` (class indices into labels.txt)."""

    INPUTS = ("",)
    DATA = "a sentence classification data directory"
    PREPARE = "bash data-prep/sva.sh"

    def net_input(self, sentences: dict) -> dict:
        (tokens,) = sentences.values()
        return {
            "src_tokens": RightPadDataset(tokens, pad_idx=self.dictionary.pad()),
            "src_lengths": NumelDataset(tokens, reduce=False),
        }
