"""Natural language inference: a premise, a hypothesis and a label (Zhang et al., sec. 5.1).

Data directory (made by data-prep/*.sh):
    premise/{dict.txt, SPLIT.bin, SPLIT.idx}     hypothesis/{the same dict.txt, SPLIT.bin, SPLIT.idx}
    SPLIT.label                                  labels.txt (the label set in its fixed order)
"""

from fairseq.data import NumelDataset, RightPadDataset
from fairseq.tasks import register_task

from .classification import ClassificationTask


@register_task("nli")
class NLITask(ClassificationTask):
    """Sentence-pair classification; premise and hypothesis share one dictionary.

    Batches hold ``net_input = {premise, premise_lengths, hypothesis, hypothesis_lengths}``
    (right-padded, without the end-of-sentence token) and ``target`` (class indices).
    """

    INPUTS = ("premise", "hypothesis")
    DATA = "an NLI data directory"
    PREPARE = "bash data-prep/snli.sh"

    def net_input(self, sentences: dict) -> dict:
        pad = self.dictionary.pad()
        inputs = {}
        for part, dataset in sentences.items():
            inputs[part] = RightPadDataset(dataset, pad_idx=pad)
            inputs[f"{part}_lengths"] = NumelDataset(dataset, reduce=False)
        return inputs
