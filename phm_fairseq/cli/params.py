"""phm-params: a fairseq model's parameters, with and without embeddings, against dense layers.

    phm-params checkpoints/checkpoint_best.pt
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

import phm_fairseq  # noqa: F401  (registers the plugin's models and tasks)
from phm_fairseq.modules import count_parameters


def load_checkpoint(path: str):
    """(model, arch) of a checkpoint file; a clear ValueError for a missing, empty or unreadable one."""
    from fairseq import checkpoint_utils

    if not os.path.isfile(path):
        folder = os.path.dirname(path) or "."
        found = sorted(name for name in os.listdir(folder) if name.endswith(".pt")) if os.path.isdir(folder) else None
        hint = (
            f"; the .pt files in {folder}: {', '.join(found)}"
            if found
            else f"; {folder} has no .pt files"
            if found is not None
            else f"; there is no folder {folder}"
        )
        raise ValueError(f"no checkpoint file {path}{hint}")
    if os.path.getsize(path) == 0:
        raise ValueError(f"{path} is empty (0 bytes): not a checkpoint; was it still being written?")
    try:
        models, cfg, _ = checkpoint_utils.load_model_ensemble_and_task([path])
    except (EOFError, RuntimeError, OSError, ValueError) as error:
        raise ValueError(
            f"{path} cannot be read as a fairseq checkpoint (truncated, or not a checkpoint): "
            f"{type(error).__name__}: {error}"
        ) from None
    return models[0], cfg.model._name


def build_model(fairseq_args):
    from fairseq import options, tasks

    if len(fairseq_args) == 1 and (fairseq_args[0].endswith(".pt") or os.path.isfile(fairseq_args[0])):
        return load_checkpoint(fairseq_args[0])
    parser = options.get_training_parser()
    args = options.parse_args_and_arch(parser, input_args=fairseq_args)
    return tasks.setup_task(args).build_model(args), args.arch


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


def main(argv=None):
    parser = argparse.ArgumentParser(
        prog="phm-params",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        usage="phm-params [--json] (CHECKPOINT.pt | DATA --task TASK --arch ARCH [fairseq-train options])",
    )
    parser.add_argument("--json", action="store_true", help="print the counts as JSON")
    parser.add_argument("--module", metavar="NAME", help="count only this submodule (dotted name, e.g. encoder.lstm)")
    ours, fairseq_args = parser.parse_known_args(argv)
    if not fairseq_args:
        parser.error("give a checkpoint file, or fairseq-train arguments (data directory, --task, --arch)")
    try:
        model, arch = build_model(fairseq_args)
    except (ValueError, FileNotFoundError) as error:  # e.g. a --phm-n that does not divide the sizes
        parser.error(str(error))
    if ours.module:
        try:
            model = model.get_submodule(ours.module)
        except AttributeError:
            names = ", ".join(name for name, _ in model.named_children())
            parser.error(f"--module {ours.module}: {arch} has no such submodule (top level: {names})")
        arch = f"{arch} {ours.module}"
    counts = count_parameters(model)
    print(json.dumps({"arch": arch, **counts.as_dict()}) if ours.json else format_table(arch, counts))


if __name__ == "__main__":
    sys.exit(main())
