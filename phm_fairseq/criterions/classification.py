"""Cross-entropy for classification models, logging loss and accuracy in training and validation."""

import math

import torch.nn.functional as F
from fairseq.criterions import FairseqCriterion, register_criterion
from fairseq.logging import metrics


@register_criterion("classification")
class ClassificationCriterion(FairseqCriterion):
    """The model maps ``sample["net_input"]`` to logits (batch, classes); targets are class indices.

    Logs ``loss`` (cross-entropy per example, in bits, as fairseq logs losses) and ``accuracy``
    (percent of the examples seen), e.g. ``--best-checkpoint-metric accuracy
    --maximize-best-checkpoint-metric``.
    """

    def forward(self, model, sample, reduce=True):
        logits = model(**sample["net_input"])
        target = sample["target"].view(-1)
        loss = F.cross_entropy(logits.float(), target, reduction="sum" if reduce else "none")
        size = target.numel()
        logging_output = {
            "loss": loss.data,
            # a tensor, summed by reduce_metrics: no .item() here, which would wait for the GPU every step
            "ncorrect": (logits.argmax(dim=-1) == target).sum(),
            "ntokens": sample["ntokens"],
            "nsentences": size,
            "sample_size": size,
        }
        return loss, size, logging_output

    @staticmethod
    def reduce_metrics(logging_outputs) -> None:
        loss = sum(log.get("loss", 0) for log in logging_outputs)
        examples = sum(log.get("nsentences", 0) for log in logging_outputs)
        correct = sum(log.get("ncorrect", 0) for log in logging_outputs)
        if examples:
            metrics.log_scalar("loss", loss / examples / math.log(2), examples, round=3)
            metrics.log_scalar("accuracy", 100.0 * correct / examples, examples, round=2)

    @staticmethod
    def logging_outputs_can_be_summed() -> bool:
        return True
