"""phm-params: a fairseq model's parameters, with and without embeddings, against dense layers.

    phm-params checkpoints/checkpoint_best.pt [--data DIR]
    phm-params data-bin/multi30k.en-de --task translation --arch phm_transformer_demo --phm-n 4
    phm-params --module encoder.lstm data-bin/snli --task nli --arch phm_lstm_nli --phm-n 5

The first form loads a trained model; the second builds one from fairseq-train arguments
(the data directory supplies the dictionaries). The dense column is the same model with
every PHM or quaternion layer replaced by the nn.Linear it stands for. --module counts one
part of the model (a dotted name: encoder.lstm is the LSTM of the NLI models, Table 1's count).
"""

import argparse
import json
import os
import sys

from phm_fairseq.cli import command
from phm_fairseq.cli.checkpoint_files import (
    data_directory,
    load_model,
    read_training_checkpoint,
    task_and_arch,
)
from phm_fairseq.cli.command import RefusedInput
from phm_layers import count_parameters


def load_checkpoint(path: str, data=None):
    """(model, arch) of a checkpoint file, its dictionaries read from ``data`` (the checkpoint's own if None)."""
    state = read_training_checkpoint(path, data)
    model, _cfg, _task = load_model(path, state, data_directory(state["cfg"], data))
    return model, task_and_arch(state["cfg"])[1]


def build_model(fairseq_args, data=None):
    """(model, arch) of a checkpoint file, or of fairseq-train arguments (a fresh model)."""
    from fairseq import options, tasks

    if len(fairseq_args) == 1 and (fairseq_args[0].endswith(".pt") or os.path.isfile(fairseq_args[0])):
        return load_checkpoint(fairseq_args[0], data)
    if data:
        raise RefusedInput(
            "--data applies to a checkpoint; with fairseq-train arguments the data directory comes first"
        )
    parser = options.get_training_parser()
    args = options.parse_args_and_arch(parser, input_args=fairseq_args)
    try:
        return tasks.setup_task(args).build_model(args), args.arch
    except (ValueError, FileNotFoundError) as error:  # e.g. a --phm-n that does not divide the sizes
        raise RefusedInput(str(error)) from None


def format_table(arch, counts) -> str:
    rows = [
        ("all parameters", counts.total, counts.dense_total),
        ("without embeddings", counts.without_embeddings, counts.dense_without_embeddings),
        ("embeddings", counts.embeddings, counts.embeddings),
    ]
    lines = [f"{arch}", f"{'':<20}{'this model':>14}{'dense layers':>14}{'ratio':>8}"]
    lines += [f"{name:<20}{ours:>14,}{dense:>14,}{ours / max(dense, 1):>7.3f}x" for name, ours, dense in rows]
    lines.append(f"{'trainable':<20}{counts.trainable:>14,}")
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(
        prog="phm-params",
        description=__doc__,
        allow_abbrev=False,  # what it does not know goes to fairseq whole
        formatter_class=argparse.RawDescriptionHelpFormatter,
        usage="phm-params [--json] [--module NAME] (CHECKPOINT.pt [--data DIR] | DATA --task TASK --arch ARCH "
        "[fairseq-train options])",
    )
    parser.add_argument("--json", action="store_true", help="print the counts as JSON")
    parser.add_argument("--module", metavar="NAME", help="count only this submodule (dotted name, e.g. encoder.lstm)")
    parser.add_argument(
        "--data", metavar="DIR", help="a checkpoint's binarized data directory, if it moved since training"
    )

    def parse(argv):
        ours, fairseq_args = parser.parse_known_args(argv)
        if not fairseq_args:
            parser.error("give a checkpoint file, or fairseq-train arguments (data directory, --task, --arch)")
        return argparse.Namespace(**vars(ours), fairseq_args=fairseq_args)

    def work(args):
        model, arch = build_model(args.fairseq_args, args.data)
        if args.module:
            try:
                model = model.get_submodule(args.module)
            except AttributeError:
                names = ", ".join(name for name, _ in model.named_children())
                raise RefusedInput(
                    f"--module {args.module}: {arch} has no such submodule (top level: {names})"
                ) from None
            arch = f"{arch} {args.module}"
        counts = count_parameters(model)
        print(json.dumps({"arch": arch, **counts.as_dict()}) if args.json else format_table(arch, counts))

    return command.main(parser.prog, parse, work, argv)


if __name__ == "__main__":
    sys.exit(main())
