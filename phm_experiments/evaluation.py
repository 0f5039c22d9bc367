"""Scoring a trained checkpoint: BLEU (fairseq-generate, then sacrebleu on the detokenized
output) or accuracy (phm-evaluate). Every example is scored, or the evaluation fails."""

import json
import shlex
from pathlib import Path

from phm_fairseq.tasks.classification import read_lines  # the plugin's reader of text lines (split on \n only)

from . import commands
from .commands import options
from .config import fill
from .results import Evaluation


class EvaluationFailed(RuntimeError):
    pass


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


def bleu(config, fields: dict, run_dir: Path, checkpoint: Path, hypotheses_file: Path) -> Evaluation:
    import sacrebleu

    spec = config.evaluate
    command = commands.fairseq_generate_command(fields["data"], checkpoint, *options(spec.generate, fields))
    finished = commands.run(command, run_dir / "evaluate.log")
    hypotheses = generated(finished.stdout)
    reference_path = Path(fill(spec.reference, fields))
    references = read_lines(reference_path)
    if sorted(hypotheses) != list(range(len(references))):
        raise EvaluationFailed(
            f"fairseq-generate translated {len(hypotheses)} sentences, but {reference_path} has "
            f"{len(references)} references: every sentence must be scored (see {run_dir}/evaluate.log)"
        )
    ordered = [hypotheses[i] for i in range(len(references))]
    hypotheses_file.write_text("".join(line + "\n" for line in ordered), encoding="utf-8")
    metric, chrf_metric = sacrebleu.metrics.BLEU(), sacrebleu.metrics.CHRF()
    score, chrf = metric.corpus_score(ordered, [references]), chrf_metric.corpus_score(ordered, [references])
    seconds, per_second = generation_speed(finished.output)
    return Evaluation(
        command=shlex.join(command),
        metric="bleu",
        score=round(score.score, 2),
        examples=len(references),
        seconds=seconds,
        examples_per_second=per_second,
        checkpoint=str(checkpoint),
        sacrebleu=f"{score} {metric.get_signature()}",
        chrf=round(chrf.score, 2),
        chrf_signature=str(chrf_metric.get_signature()),
    )


def accuracy(config, fields: dict, run_dir: Path, checkpoint: Path, hypotheses_file: Path = None) -> Evaluation:
    command = [
        "phm-evaluate",
        fields["data"],
        "--path",
        str(checkpoint),
        "--subset",
        fill(config.evaluate.subset, fields),
        "--json",
    ]
    finished = commands.run(command, run_dir / "evaluate.log")
    report = json.loads(finished.stdout.rstrip("\n").split("\n")[-1])
    return Evaluation(
        command=shlex.join(command),
        metric="accuracy",
        score=round(report["accuracy"], 2),
        examples=report["examples"],
        examples_per_second=report["examples_per_second"],
        checkpoint=str(checkpoint),
        accuracy=report["accuracy"],
        labels=report["labels"],
        confusion=report["confusion"],
    )


EVALUATORS = {"bleu": bleu, "accuracy": accuracy}


def evaluate(config, fields: dict, run_dir: Path, checkpoint: Path, epoch: int = None, name: str = None) -> Evaluation:
    """Scores ``checkpoint``; its hypotheses go to ``name`` in the run's folder (default hypotheses.txt,
    hypotheses.epochN.txt for an epoch's checkpoint)."""
    if not checkpoint.is_file():
        raise EvaluationFailed(f"no checkpoint {checkpoint} to evaluate")
    name = name or ("hypotheses.txt" if epoch is None else f"hypotheses.epoch{epoch}.txt")
    evaluation = EVALUATORS[config.evaluate.kind](config, fields, run_dir, checkpoint, run_dir / name)
    evaluation.epoch = epoch
    return evaluation
