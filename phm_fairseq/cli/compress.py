"""phm-compress: the nearest PHM or quaternion Transformer to a trained dense one, as a checkpoint.

    phm-compress checkpoints/dense/checkpoint_best.pt --arch phm_transformer_demo --phm-n 4 --out phm_n4.pt
    phm-compress dense.pt --arch quaternion_transformer_partial_demo --out quaternion_partial.pt
    phm-compress tiny.pt --arch phm_transformer_demo --phm-n 2 --encoder-layers 1 ... --out phm_n2.pt

DENSE.pt is a fairseq translation checkpoint of the plugin's dense twin (transformer_twin_*) or
of fairseq's own transformer (transformer, transformer_iwslt_de_en, ...). --arch has the dense
model's sizes: transformer_twin_demo (the README's dense model) compresses to the *_demo
architectures, transformer_twin_iwslt to *_iwslt, transformer_twin_base to *_base. Every linear
map that --arch makes hypercomplex gets the nearest weights to the dense one (a learned PHM rule:
the nearest sum of n Kronecker products; an algebra rule or quaternion layer: the least-squares
component weights for that rule; a fused Q/K/V projection: q, k and v stacked); everything else
(embeddings, positions, layer norms, biases, the output projection) is copied exactly.

The model keeps the dense model's sizes. For a dense model of other sizes (tiny.pt above), pass
its sizes (the size flags below; the refusal names them): they must match the checkpoint, and
fine-tuning needs the same flags. The output is a fairseq checkpoint of --arch without optimizer
state: fairseq-generate loads it, and
    fairseq-train DATA --user-dir PLUGIN --arch ARCH [the same model flags] --finetune-from-model OUT ...
fine-tunes it. A per-layer table of relative errors ||W - H||_F / ||W||_F and the parameter
counts go to stdout (--json: one JSON line instead).
"""

import argparse
import copy
import json
import sys

import torch

from phm_fairseq import PLUGIN_DIR
from phm_fairseq.cli import command
from phm_fairseq.cli.checkpoint_files import (
    check_out,
    load_model,
    read_training_checkpoint,
    require_task,
    task_and_arch,
    translation_data_directory,
    written_in_place,
)
from phm_fairseq.models.compress import CompressionError, compress_into, total_relative_error
from phm_fairseq.models.linear_args import LINEAR_FLAGS, TRANSFORMER_FLAGS, dest
from phm_layers import count_parameters

HYPERCOMPLEX_KINDS = ("phm", "quaternion")
SIZE_KEYS = tuple(
    f"{side}_{key}"
    for side in ("encoder", "decoder")
    for key in ("layers", "embed_dim", "ffn_embed_dim", "attention_heads")
)
MODEL_FLAGS = {**LINEAR_FLAGS, **TRANSFORMER_FLAGS}
"""The target models' own flags, as the models declare them (models/linear_args.py)."""
HONOURED = {
    "--phm-n": "Default: the architecture's, 4",
    "--phm-rule": "phm-compress fits learned as the nearest sum of N Kronecker products, an algebra rule as "
    "the algebra's A with S fitted to it",
    "--phm-rank": "phm-compress fits each S_i's nearest rank-R factors",
    "--phm-lowrank": "phm-compress fits U V^T to what the Kronecker sum leaves of each dense weight (truncated SVD)",
    "--phm-factor-norm": "phm-compress sets the gains that give the fitted Kronecker sum",
    "--qkv-projection": "phm-compress stacks the dense q, k and v for fused",
    "--dense-ffn": "phm-compress copies them exactly",
    "--dense-attention": "phm-compress copies them exactly",
    "--quaternion-attention": None,  # accepted only to be refused with its reason (check_target); not in --help
}
"""The model flags that phm-compress takes (the others are refused, see parse_args), each with
what it does with it (added to the model's help). --linear-kind: the architecture decides it;
--phm-shared-rule: one A for many layers is not fitted."""
# The target's own flags: the architecture decides them, not the dense model's arguments.
HYPERCOMPLEX_KEYS = tuple(dest(name) for name in MODEL_FLAGS)
GIVEN_KEYS = tuple(dest(name) for name in HONOURED)


def flag(key: str) -> str:
    return "--" + key.replace("_", "-")


def architecture_kind(arch: str, model_args=None):
    """ "dense", "phm" or "quaternion" for the translation Transformers that phm-compress reads and
    writes, None for any other architecture: the plugin's architecture table (or a checkpoint's
    --linear-kind) and fairseq's own transformer architectures (dense)."""
    from fairseq.models import ARCH_MODEL_NAME_REGISTRY

    from phm_fairseq.models.transformer import ARCHITECTURES

    if arch in ARCHITECTURES:
        return getattr(model_args, "linear_kind", None) or ARCHITECTURES[arch][0]
    return "dense" if ARCH_MODEL_NAME_REGISTRY.get(arch) == "transformer" else None


def architectures(kind: str) -> list:
    from fairseq.models import ARCH_MODEL_REGISTRY

    return sorted(arch for arch in ARCH_MODEL_REGISTRY if architecture_kind(arch) == kind)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="phm-compress",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        allow_abbrev=False,
    )
    parser.add_argument("checkpoint", metavar="DENSE.pt", help="trained dense fairseq translation checkpoint")
    parser.add_argument(
        "--arch", required=True, help="target architecture: phm_transformer_* or quaternion_transformer_*"
    )
    parser.add_argument("--out", required=True, metavar="PHM.pt", help="checkpoint to write")
    parser.add_argument(
        "--data",
        metavar="DIR",
        help="the binarized data directory, if it moved since training (the dictionaries are read from it)",
    )
    parser.add_argument("--force", action="store_true", help="overwrite --out if it exists")
    parser.add_argument("--json", action="store_true", help="print the report as one JSON line")
    model = parser.add_argument_group("target model (the flags phm-compress can honour)")
    for name, note in HONOURED.items():
        declaration = dict(MODEL_FLAGS[name])
        declaration["help"] = f"{declaration['help']}. {note}" if note else argparse.SUPPRESS
        if declaration.get("action") == "store_true":
            declaration["default"] = None  # None: not given, the architecture decides (as for the other flags)
        model.add_argument(name, **declaration)
    sizes = parser.add_argument_group("sizes (must equal the checkpoint's; needed where --arch's own differ)")
    for key in SIZE_KEYS:
        sizes.add_argument(flag(key), dest=key, type=int, metavar="N")
    return parser


PHYDI_REFUSAL = (
    "cannot honour --phydi: PHYDI adds a residual_gate parameter to every attention module and fc2, which the "
    "dense model has no counterpart for, so the compressed checkpoint has none and a model built with --phydi "
    "does not load it (fairseq-train --finetune-from-model: missing residual_gate keys). Compress and fine-tune "
    "without --phydi"
)
"""--phydi is a model flag that adds parameters: unlike a training option, it cannot wait for fine-tuning."""


def parse_args(argv):
    parser = build_parser()
    args, unknown = parser.parse_known_args(argv)
    if any(u == "--phydi" or u.startswith("--phydi=") for u in unknown):
        parser.error(PHYDI_REFUSAL)
    if unknown:
        parser.error(
            f"cannot honour {' '.join(unknown)}: phm-compress sets only the architecture, its hypercomplex "
            f"flags ({', '.join(name for name, note in HONOURED.items() if note)}) and sizes equal to the "
            f"checkpoint's; give training options to fairseq-train when fine-tuning"
            + (
                "; a shared rule (one A for many layers) is not fitted: compress without it and fine-tune"
                if any(u.startswith("--phm-shared-rule") for u in unknown)
                else ""
            )
        )
    return args


def check_target(args) -> dict:
    """The model flags given on the command line, once the target can honour them all."""
    kind = architecture_kind(args.arch)
    if kind not in HYPERCOMPLEX_KINDS:
        what = {None: "not a translation Transformer architecture", "dense": "a dense architecture"}[kind]
        targets = ", ".join(arch for kind in HYPERCOMPLEX_KINDS for arch in architectures(kind))
        raise CompressionError(f"--arch {args.arch} is {what}; phm-compress writes one of {targets}")
    if args.quaternion_attention:
        raise CompressionError(
            "--quaternion-attention cannot be honoured: its attention (four softmaxes over Hamilton-product "
            "logits) is another function than the dense model's, so no weights approximate it. Compress "
            "without it"
        )
    given = {key: value for key, value in vars(args).items() if key in GIVEN_KEYS + SIZE_KEYS and value is not None}
    if kind != "phm":
        for key in ("phm_n", "phm_rule", "phm_rank", "phm_lowrank", "phm_factor_norm"):
            if key in given:
                raise CompressionError(
                    f"{flag(key)} applies to phm_transformer architectures; {args.arch}'s "
                    f"quaternion layers have n = 4 and Hamilton's rule"
                )
    return given


def read_checkpoint(path: str, data):
    """The checkpoint's state (fairseq's upgraded form), once it is known to be a dense translation Transformer."""
    from fairseq.models import ARCH_MODEL_NAME_REGISTRY
    from fairseq.tasks.translation import TranslationTask

    state = read_training_checkpoint(path, data)
    cfg = state["cfg"]
    require_task(path, cfg, TranslationTask, "phm-compress compresses translation Transformers (task translation)")
    model_cfg, (_task, arch) = cfg.model, task_and_arch(cfg)
    if architecture_kind(arch, model_cfg) != "dense" or not isinstance(model_cfg, argparse.Namespace):
        raise CompressionError(
            f"{path} holds a {ARCH_MODEL_NAME_REGISTRY.get(arch, arch)!r} model (arch {arch!r}); phm-compress takes "
            f"a dense Transformer: the plugin's dense twin (transformer_twin_*) or fairseq's transformer "
            f"(transformer, transformer_iwslt_de_en, transformer_wmt_en_de, ...)"
        )
    return state


def check_sizes(path: str, dense_args, arch: str, given: dict) -> None:
    """Refuses an architecture whose sizes (with the given size flags) are not the checkpoint's."""
    from fairseq.models import ARCH_CONFIG_REGISTRY

    def sizes(name, flags):
        args = argparse.Namespace(**flags)
        ARCH_CONFIG_REGISTRY[name](args)
        return {key: getattr(args, key) for key in SIZE_KEYS}

    ours = {key: getattr(dense_args, key, None) for key in SIZE_KEYS}
    requested = sizes(arch, {key: value for key, value in given.items() if key in SIZE_KEYS})
    if requested == ours:
        return
    differ = ", ".join(
        f"{flag(key)} {ours[key]} against {requested[key]}" for key in SIZE_KEYS if ours[key] != requested[key]
    )
    kind = architecture_kind(arch)
    same = [name for name in architectures(kind) if sizes(name, {}) == ours]
    sizes_flags = " ".join(f"{flag(key)} {ours[key]}" for key in SIZE_KEYS if ours[key] != sizes(arch, {})[key])
    raise CompressionError(
        f"{path} ({dense_args.arch}) has other sizes than {arch}: {differ}. "
        + (
            f"{', '.join(same)} {'has' if len(same) == 1 else 'have'} the checkpoint's sizes; or "
            if same
            else f"No {kind} architecture has them: "
        )
        + f"give them with the architecture (--arch {arch} {sizes_flags}), and to fairseq-train when fine-tuning"
    )


def target_args(dense_args, arch: str, given: dict, data: str):
    """The dense model's arguments with only the architecture and its hypercomplex flags changed."""
    args = copy.deepcopy(dense_args)
    for key in HYPERCOMPLEX_KEYS:
        if hasattr(args, key):
            delattr(args, key)
    args.arch = args._name = arch
    args.data = data
    for key, value in given.items():
        setattr(args, key, value)
    return args


def compress(args, progress=True) -> dict:
    """Does the work of the command; returns its report. Raises CompressionError or RefusedInput on bad input."""
    from omegaconf import OmegaConf
    from tqdm import tqdm

    given = check_target(args)
    check_out(args.out, force=args.force, inputs={args.checkpoint: "the dense checkpoint"})
    state = read_checkpoint(args.checkpoint, args.data)
    dense_args = state["cfg"].model
    check_sizes(args.checkpoint, dense_args, args.arch, given)
    data = translation_data_directory(state["cfg"], args.data)
    dense, cfg, task = load_model(args.checkpoint, state, data)
    dense = dense.eval()
    new_args = target_args(dense_args, args.arch, given, data)
    try:
        target = task.build_model(new_args).eval()
    except ValueError as error:  # flags the architecture refuses, e.g. an n that does not divide the sizes
        raise CompressionError(str(error)) from None

    layers = compress_into(
        dense,
        target,
        progress=lambda layers: tqdm(layers, desc="compressing", unit="layer", disable=None if progress else True),
    )  # None: off unless a terminal
    before, after = count_parameters(dense), count_parameters(target)
    report = {
        "checkpoint": args.checkpoint,
        "dense_arch": dense_args.arch,
        "out": args.out,
        "arch": args.arch,
        "layers": [layer.as_dict() for layer in layers],
        "relative_error": total_relative_error(layers),
        "parameters": {"dense": before.as_dict(), "compressed": after.as_dict()},
        # what the fine-tuning command must say besides the dense model's own flags
        "model_flags": ["--arch", args.arch, *(part for key, value in given.items() for part in _as_flag(key, value))],
    }

    checkpoint = {
        "args": None,
        "cfg": {**OmegaConf.to_container(cfg, resolve=True, enum_to_str=True), "model": new_args},
        "model": target.state_dict(),
        "criterion": None,
        # not trained yet: no optimizer state, no updates; fine-tuning starts a fresh optimizer
        "optimizer_history": [{**state["optimizer_history"][-1], "lr_scheduler_state": {}, "num_updates": 0}],
        "task_state": state.get("task_state", {}),
        "extra_state": {
            "train_iterator": {"version": 2, "epoch": 1, "iterations_in_epoch": 0, "shuffle": True},
            "previous_training_time": 0.0,
        },
        "phm_compress": {key: value for key, value in report.items() if key != "out"},
    }
    checkpoint["cfg"]["task"]["data"] = data
    with written_in_place(args.out) as path:
        torch.save(checkpoint, path)
    return report


def _as_flag(key, value) -> list:
    return [flag(key)] if value is True else [flag(key), str(value)]


def format_report(report: dict) -> str:
    layers = report["layers"]
    width = max(len("layer"), *(len(layer["name"]) for layer in layers))
    shape = lambda layer: f"{layer['out_features']} x {layer['in_features']}"  # noqa: E731
    lines = [
        f"{report['checkpoint']} ({report['dense_arch']}) -> {report['out']} ({report['arch']})",
        f"{'layer':<{width}}  {'shape':>11}  {'n':>2}  {'kind':<18}  {'rel. error':>10}",
    ]
    lines += [
        f"{layer['name']:<{width}}  {shape(layer):>11}  {layer['n']:>2}  {layer['kind']:<18}  "
        f"{layer['relative_error']:>10.4f}"
        for layer in layers
    ]
    lines.append(f"{'all these weights together':<{width + 39}}  {report['relative_error']:>10.4f}")
    dense, compressed = report["parameters"]["dense"], report["parameters"]["compressed"]
    lines.append(f"\n{'parameters':<20}{'dense':>14}{'compressed':>14}{'ratio':>8}")
    for name, key in (("all", "total"), ("without embeddings", "without_embeddings")):
        lines.append(f"{name:<20}{dense[key]:>14,}{compressed[key]:>14,}{compressed[key] / max(dense[key], 1):>7.3f}x")
    lines.append(
        f"\nTo fine-tune: the dense model's fairseq-train command with {' '.join(report['model_flags'])} "
        f"(and --user-dir {PLUGIN_DIR} if it has none), --finetune-from-model {report['out']} and a new --save-dir"
    )
    return "\n".join(lines)


def main(argv=None) -> int:
    def work(args):
        report = compress(args, progress=not args.json)
        print(json.dumps(report) if args.json else format_report(report))

    return command.main("phm-compress", parse_args, work, argv, refusals=(CompressionError,))


if __name__ == "__main__":
    sys.exit(main())
