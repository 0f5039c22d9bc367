"""The evaluation step: a run's trained checkpoints scored, by BLEU (fairseq-generate, then sacrebleu
on the detokenized output) or accuracy (phm-evaluate). Every example is scored, or the evaluation fails."""

import dataclasses
import json
from pathlib import Path
from typing import Optional

from phm_fairseq.tasks.classification import read_lines  # the plugin's reader of text lines (split on \n only)

from . import averaging, commands
from .commands import options
from .results import Evaluation, portable_command
from .resume import saved_updates
from .run_folder import RunError


class EvaluationFailed(RuntimeError):
    pass


@dataclasses.dataclass
class Evaluated:
    """The evaluation step's part of result.json (its fields, by their names there)."""

    evaluation: Evaluation  # of checkpoint_best.pt
    epoch_evaluations: list[Evaluation]  # one per evaluate.epochs entry
    averaged_evaluation: Optional[Evaluation]  # evaluate.average_last

    def summary(self) -> str:
        """The scores, as the run's last line says them."""
        scores = [f"after epoch {e.epoch}: {e.score}" for e in self.epoch_evaluations]
        if self.averaged_evaluation:
            count = len(self.averaged_evaluation.averaged)
            scores.append(f"the last {count} epochs averaged: {self.averaged_evaluation.score}")
        best = self.evaluation
        return f"{best.metric} {best.score}" + (f" ({', '.join(scores)})" if scores else "")


def evaluate(run, init) -> Evaluated:
    """checkpoint_best.pt scored, each of evaluate.epochs' end-of-epoch checkpoints (epoch 0: the ``init``
    checkpoint, e.g. a compressed model before fine-tuning), and the average of the last evaluate.average_last."""
    run.say("evaluating")
    folder = run.folder
    best = score(run, folder.best, folder.hypotheses())
    epochs = []
    for epoch in run.config.evaluate.epochs:
        checkpoint = Path(init.checkpoint) if epoch == 0 else folder.epoch(epoch)
        if not checkpoint.is_file():
            saved = sorted(p.name for p in folder.checkpoints.glob("checkpoint[0-9]*.pt"))
            raise RunError(
                f"{run.config.path}: evaluate.epochs asks for epoch {epoch}, but the training saved no "
                f"{checkpoint} (its epoch checkpoints: {', '.join(saved) or 'none'})"
            )
        scored = score(run, checkpoint, folder.hypotheses(epoch=epoch))
        epochs.append(scored.model_copy(update={"epoch": epoch, "updates": saved_updates(checkpoint)}))
    count = run.config.evaluate.average_last
    return Evaluated(best, epochs, evaluate_average(run, count) if count else None)


def evaluate_average(run, count: int) -> Evaluation:
    """The average of the last ``count`` epoch checkpoints (checkpoint_avg_lastK.pt), scored."""
    folder = run.folder
    try:
        sources = averaging.last_epoch_checkpoints(folder.checkpoints, count)
    except averaging.AveragingError as error:
        raise RunError(f"{run.config.path}: evaluate.average_last: {error}") from None
    average = averaging.average_checkpoints(sources, folder.average(count))
    run.say(f"averaged {', '.join(p.name for p in sources)} -> {average}")
    scored = score(run, average, folder.hypotheses(average=count))
    return scored.model_copy(update={"averaged": [str(p) for p in sources]})


def score(run, checkpoint: Path, hypotheses: Path) -> Evaluation:
    """``checkpoint`` scored by the config's evaluate.kind; its translations (bleu) go to ``hypotheses``."""
    if not checkpoint.is_file():
        raise EvaluationFailed(f"no checkpoint {checkpoint} to evaluate")
    return SCORERS[run.config.evaluate.kind](run, checkpoint, hypotheses)


def generated(stdout: str) -> dict:
    """fairseq-generate's detokenized hypotheses (its D- lines) by sentence id."""
    hypotheses = {}
    for line in stdout.split("\n"):
        if line.startswith("D-"):
            index, _score, *text = line.split("\t")
            hypotheses[int(index[2:])] = text[0] if text else ""
    return hypotheses


def generation_speed(output: str) -> tuple:
    """(seconds, sentences per second) from fairseq-generate's closing log message
    "Translated 1,000 sentences (25,110 tokens) in 10.5s (95.18 sentences/s, 2391.48 tokens/s)"
    (fairseq's record format, or Python's default "INFO:fairseq_cli.generate:..." where logging
    was set up before fairseq-generate configured it)."""
    for line in output.split("\n"):
        if "fairseq_cli.generate" in line and "Translated " in line and " sentences/s" in line:
            message = line[line.index("Translated ") :]
            seconds = message.split(" in ", 1)[1].split("s (", 1)[0]
            per_second = message.rsplit("(", 1)[1].split(" sentences/s")[0]
            try:
                return float(seconds), float(per_second)
            except ValueError:
                break
    return None, None


def bleu(run, checkpoint: Path, hypotheses_file: Path) -> Evaluation:
    import sacrebleu

    spec = run.config.evaluate
    command = commands.fairseq_generate_command(run.config.data, checkpoint, *options(spec.generate, run.fields))
    finished = commands.run(command, run.folder.log("evaluate"))
    hypotheses = generated(finished.stdout)
    reference_path = Path(run.fill(spec.reference))
    references = read_lines(reference_path)
    if sorted(hypotheses) != list(range(len(references))):
        raise EvaluationFailed(
            f"fairseq-generate translated {len(hypotheses)} sentences, but {reference_path} has "
            f"{len(references)} references: every sentence must be scored (see {run.folder.log('evaluate')})"
        )
    ordered = [hypotheses[i] for i in range(len(references))]
    hypotheses_file.write_text("".join(line + "\n" for line in ordered), encoding="utf-8")
    metric, chrf_metric = sacrebleu.metrics.BLEU(), sacrebleu.metrics.CHRF()
    score, chrf = metric.corpus_score(ordered, [references]), chrf_metric.corpus_score(ordered, [references])
    seconds, per_second = generation_speed(finished.output)
    return Evaluation(
        command=portable_command(command),
        metric="bleu",
        score=round(score.score, 2),
        examples=len(references),
        seconds=seconds,
        examples_per_second=per_second,
        checkpoint=str(checkpoint),
        sacrebleu=f"{score} {metric.get_signature()}",
        chrf=round(chrf.score, 2),
        chrf_signature=str(chrf_metric.get_signature()),
        load_average=finished.load_average,
    )


def accuracy(run, checkpoint: Path, hypotheses_file: Path = None) -> Evaluation:
    subset = run.fill(run.config.evaluate.subset)
    command = ["phm-evaluate", run.config.data, "--path", str(checkpoint), "--subset", subset, "--json"]
    finished = commands.run(command, run.folder.log("evaluate"))
    report = json.loads(finished.stdout.rstrip("\n").split("\n")[-1])
    return Evaluation(
        command=portable_command(command),
        metric="accuracy",
        score=round(report["accuracy"], 2),
        examples=report["examples"],
        examples_per_second=report["examples_per_second"],
        checkpoint=str(checkpoint),
        accuracy=report["accuracy"],
        labels=report["labels"],
        confusion=report["confusion"],
        load_average=finished.load_average,
    )


SCORERS = {"bleu": bleu, "accuracy": accuracy}
