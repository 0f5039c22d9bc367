"""phm-evaluate: accuracy of a trained classifier on every example of a split, with a confusion matrix.

    phm-evaluate data-bin/snli --path checkpoints/checkpoint_best.pt --subset test
    phm-evaluate data-bin/snli --path checkpoints/checkpoint_best.pt --json   # last stdout line: JSON

For the plugin's classification tasks (nli, and any task built on ClassificationTask): the model
maps a batch's net_input to one logit per label of the data directory's labels.txt. Every
example is scored (batches of any size, none dropped); the count is checked.
With --json the last line of stdout is
    {"accuracy": percent, "examples": int, "examples_per_second": float,
     "labels": [...], "confusion": [[...]]}      (confusion[gold][predicted], in labels order)
"""

import argparse
import json
import os
import sys
import time

import torch

from phm_fairseq.cli import command
from phm_fairseq.cli.checkpoint_files import load_model, read_training_checkpoint, require_task
from phm_fairseq.cli.command import RefusedInput


def load_classifier(path: str, data: str):
    """(model, task) from a checkpoint, for the data directory ``data``; clear errors otherwise."""
    from fairseq import tasks

    from phm_fairseq.tasks.classification import ClassificationTask

    if not os.path.isdir(data):
        raise RefusedInput(f"{data}: no such data directory")
    state = read_training_checkpoint(path, data)
    ours = sorted(name for name, task in tasks.TASK_REGISTRY.items() if issubclass(task, ClassificationTask))
    require_task(
        path,
        state["cfg"],
        ClassificationTask,
        f"phm-evaluate scores the plugin's classification tasks ({', '.join(ours)})",
    )
    model, _cfg, task = load_model(path, state, data)
    return model, task


def evaluate(model, task, subset: str, batch_size: int = 256) -> dict:
    """Scores every example of ``subset``; returns the JSON report's fields."""
    try:
        task.load_dataset(subset)
    except FileNotFoundError as error:
        raise RefusedInput(str(error)) from None
    dataset = task.dataset(subset)
    batches = task.get_batch_iterator(dataset=dataset, max_sentences=batch_size).next_epoch_itr(shuffle=False)
    labels = list(task.labels)
    confusion = torch.zeros(len(labels), len(labels), dtype=torch.long)
    scored = set()
    model.eval()
    start = time.perf_counter()
    with torch.inference_mode():
        for sample in batches:
            logits = model(**sample["net_input"])
            if logits.size(-1) != len(labels):
                raise RefusedInput(f"the model predicts {logits.size(-1)} classes, labels.txt has {len(labels)}")
            predicted = logits.argmax(dim=-1)
            confusion.index_put_((sample["target"], predicted), torch.ones_like(predicted), accumulate=True)
            scored.update(sample["id"].tolist())
    seconds = time.perf_counter() - start
    if len(scored) != len(dataset) or int(confusion.sum()) != len(dataset):
        raise RefusedInput(f"scored {int(confusion.sum())} of the {len(dataset)} examples of {subset!r}")
    correct = int(confusion.diag().sum())
    return {
        "accuracy": 100.0 * correct / len(dataset),
        "examples": len(dataset),
        "examples_per_second": len(dataset) / seconds if seconds > 0 else float("inf"),
        "labels": labels,
        "confusion": confusion.tolist(),
    }


def format_report(report: dict, subset: str) -> str:
    labels, confusion = report["labels"], report["confusion"]
    width = max(10, *(len(label) + 2 for label in labels))
    lines = [
        f"{subset}: accuracy {report['accuracy']:.2f}% ({sum(confusion[i][i] for i in range(len(labels)))} of "
        f"{report['examples']} examples), {report['examples_per_second']:.0f} examples/s",
        "confusion matrix (rows: gold label, columns: predicted):",
        f"{'':<{width}}" + "".join(f"{label:>{width}}" for label in labels),
    ]
    lines += [f"{gold:<{width}}" + "".join(f"{n:>{width}}" for n in row) for gold, row in zip(labels, confusion)]
    return "\n".join(lines)


def positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive number of examples, not {text!r}")
    return value


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(
        prog="phm-evaluate", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("data", help="data directory made by data-prep (e.g. data-bin/snli)")
    parser.add_argument("--path", required=True, help="checkpoint file (e.g. checkpoints/checkpoint_best.pt)")
    parser.add_argument("--subset", default="test", help="split to score (default: test)")
    parser.add_argument(
        "--batch-size", type=positive_int, default=256, help="examples per batch (any size: all are scored)"
    )
    parser.add_argument("--json", action="store_true", help="end stdout with the report as one JSON line")

    def work(args):
        model, task = load_classifier(args.path, args.data)
        report = evaluate(model, task, args.subset, args.batch_size)
        print(format_report(report, args.subset))
        if args.json:
            print(json.dumps(report))

    return command.main(parser.prog, parser.parse_args, work, argv)


if __name__ == "__main__":
    sys.exit(main())
