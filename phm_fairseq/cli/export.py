"""phm-export: a PHM or quaternion translation Transformer as fairseq's own transformer, for use without the plugin.

    phm-export checkpoints/phm4/checkpoint_best.pt --out phm4_dense.pt
    phm-export checkpoints/phm4/checkpoint_best.pt --format ctranslate2 --quantization int8 --out phm4_ct2

PHM.pt is a fairseq translation checkpoint of the plugin's hypercomplex_transformer (phm_transformer_*,
quaternion_transformer_*, the dense twin transformer_twin_*). Every PHM or quaternion layer becomes the
nn.Linear it computes (H = sum_i A_i kron S_i), a fused Q/K/V projection becomes q_proj, k_proj and
v_proj; everything else is copied. The model computes the same function with the dense layer's
parameters (about n times those of the PHM layers).

--format fairseq (the default) writes a checkpoint of fairseq's `transformer` architecture whose
configuration is plain dicts and lists: stock fairseq-generate, fairseq-interactive and
TransformerModel.from_pretrained load it without the plugin (no --user-dir) and, on torch >= 2.6,
without unsafe loading. Its optimizer_history keeps the last entry (no optimizer state).

--format ctranslate2 writes a CTranslate2 model directory (needs `pip install 'phm-fairseq[export]'`):
the same dense model converted by ctranslate2's FairseqConverter, weights quantized as --quantization
says; the vocabularies come from the fairseq dictionaries of the data directory.

Refused: quaternion attention (--quaternion-attention has no counterpart in fairseq's transformer),
models of other tasks (PHM-LSTM, classifiers), checkpoints that are not the plugin's.
"""

import argparse
import json
import os
import sys

import torch

import phm_fairseq
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
from phm_fairseq.cli.command import RefusedInput
from phm_layers import count_parameters

FORMATS = ("fairseq", "ctranslate2")
# ctranslate2's own list (ctranslate2.specs.model_spec.ACCEPTED_MODEL_TYPES; a test holds them equal),
# written out so that --help shows it where the optional ctranslate2 is not installed
QUANTIZATIONS = ("int8", "int8_float32", "int8_float16", "int8_bfloat16", "int16", "float16", "bfloat16", "float32")
CTRANSLATE2_MISSING = (
    "--format ctranslate2 needs the ctranslate2 package: pip install 'phm-fairseq[export]' (or pip install ctranslate2)"
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="phm-export",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        allow_abbrev=False,
    )
    parser.add_argument("checkpoint", metavar="PHM.pt", help="a translation checkpoint trained with the plugin")
    parser.add_argument(
        "--out", required=True, metavar="PATH", help="the checkpoint file (fairseq) or model directory (ctranslate2)"
    )
    parser.add_argument("--format", choices=FORMATS, default="fairseq", help="what to write (default: fairseq)")
    parser.add_argument(
        "--quantization",
        choices=QUANTIZATIONS,
        help="--format ctranslate2 only: the weights' type (default: float32, as trained)",
    )
    parser.add_argument(
        "--data",
        metavar="DIR",
        help="the binarized data directory, if it moved since training (the dictionaries are read from it)",
    )
    parser.add_argument("--force", action="store_true", help="overwrite --out if it exists")
    parser.add_argument("--json", action="store_true", help="print the report as one JSON line")
    return parser


def parse_args(argv):
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.quantization and args.format != "ctranslate2":
        parser.error(
            f"--quantization {args.quantization} applies to --format ctranslate2; a fairseq checkpoint keeps the "
            f"trained float32 weights (fairseq-generate --fp16 halves them)"
        )
    return args


def exportable_model_args(path: str, state: dict):
    """The checkpoint's model arguments, once it is known to hold a translation model of the plugin
    that fairseq's transformer can compute."""
    from fairseq.models import ARCH_MODEL_NAME_REGISTRY
    from fairseq.tasks.translation import TranslationTask

    cfg = state["cfg"]
    require_task(
        path,
        cfg,
        TranslationTask,
        "phm-export exports translation Transformers (task translation) only: fairseq has no stock model that "
        "computes the PHM-LSTM or the classifiers",
    )
    _task, arch = task_and_arch(cfg)
    model_name = ARCH_MODEL_NAME_REGISTRY.get(arch)
    if model_name == "transformer":
        raise RefusedInput(
            f"{path} holds fairseq's own transformer (arch {arch!r}), not a model of the plugin: stock fairseq "
            f"loads it as it is, there is nothing to export"
        )
    if model_name != "hypercomplex_transformer" or not isinstance(cfg.model, argparse.Namespace):
        raise RefusedInput(
            f"{path} holds a {model_name or arch!r} model (arch {arch!r}), not one of the plugin's translation "
            f"Transformers (phm_transformer_*, quaternion_transformer_*, transformer_twin_*)"
        )
    if getattr(cfg.model, "quaternion_attention", False):
        from phm_fairseq.models.export import QUATERNION_ATTENTION_REFUSAL

        raise RefusedInput(f"{path} ({arch}) has quaternion attention: {QUATERNION_ATTENTION_REFUSAL}")
    return cfg.model


def plain(value):
    """``value`` with every Namespace a dict and every tuple a list, checked to hold nothing else than
    what torch's weights_only loader and OmegaConf take (stock fairseq loads the checkpoint so)."""
    if isinstance(value, argparse.Namespace):
        value = vars(value)
    if isinstance(value, dict):
        return {key: plain(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain(item) for item in value]
    if value is None or type(value) in (bool, int, float, str, torch.Tensor):
        return value
    raise TypeError(f"a {type(value).__name__} in the exported checkpoint: {value!r}")


KEPT_EXTRA_STATE = ("train_iterator", "val_loss", "best")  # where training stood; its meters are of no use


def stock_checkpoint(state: dict, model, model_args, data: str, source: str) -> dict:
    """The fairseq checkpoint of the densified ``model`` as fairseq's transformer, its configuration
    plain dicts and lists (``model_args``: the transformer's, put in as they are)."""
    from omegaconf import OmegaConf

    cfg = OmegaConf.to_container(state["cfg"], resolve=True, enum_to_str=True)
    cfg["model"] = None  # the plugin's arguments class: replaced below
    cfg = plain(cfg)
    cfg["common"]["user_dir"] = None
    cfg["task"]["data"] = data
    last = state["optimizer_history"][-1]
    return {
        "args": None,
        "cfg": {**cfg, "model": model_args},
        "model": model.state_dict(),
        "criterion": None,
        # fairseq's loader upgrades from its last entry; the optimizer state is of no use without training
        "optimizer_history": [plain({key: value for key, value in last.items() if key != "optimizer"})],
        "task_state": plain(state.get("task_state") or {}),
        "extra_state": plain({key: value for key, value in state["extra_state"].items() if key in KEPT_EXTRA_STATE}),
        "phm_export": {"source": os.path.abspath(source), "phm_fairseq": phm_fairseq.__version__},
    }


def to_ctranslate2(checkpoint: dict, data: str, out: str, quantization: str) -> None:
    """ctranslate2's FairseqConverter on ``checkpoint``, written to ``out``.

    The converter sets attributes on the checkpoint's model configuration (``args.data = ...``), so it
    needs the Namespace form, which torch >= 2.6 loads only unsafely: the checkpoint is written for it
    alone, here, and read back with unsafe_deserialization (it is the file this process just wrote).
    """
    import tempfile

    from ctranslate2.converters import FairseqConverter

    args = checkpoint["cfg"]["model"]
    with tempfile.TemporaryDirectory(prefix="phm-export.") as work:
        path = os.path.join(work, "checkpoint.pt")
        torch.save({**checkpoint, "cfg": {**checkpoint["cfg"], "model": argparse.Namespace(**args)}}, path)
        languages = {"source_lang": args.get("source_lang"), "target_lang": args.get("target_lang")}
        FairseqConverter(path, data, **languages, unsafe_deserialization=True).convert(out, quantization=quantization)


def disk_bytes(path: str) -> int:
    if os.path.isfile(path):
        return os.path.getsize(path)
    return sum(os.path.getsize(os.path.join(root, name)) for root, _, names in os.walk(path) for name in names)


def export(args) -> dict:
    """Does the work of the command; returns its report. Raises RefusedInput on bad input."""
    from phm_fairseq.models.export import densify, stock_transformer_args

    ctranslate2 = args.format == "ctranslate2"
    check_out(args.out, force=args.force, inputs={args.checkpoint: "the PHM checkpoint"}, directory=ctranslate2)
    if ctranslate2:
        try:
            import ctranslate2  # noqa: F401
        except ImportError:
            raise RefusedInput(CTRANSLATE2_MISSING) from None
    state = read_training_checkpoint(args.checkpoint, args.data)
    model_args = exportable_model_args(args.checkpoint, state)
    data = translation_data_directory(state["cfg"], args.data)
    model, _cfg, _task = load_model(args.checkpoint, state, data)
    # H in float32, whatever the training's precision: fairseq-generate halves the model itself (--fp16)
    model = model.float().eval()
    before = count_parameters(model)
    dense = densify(model)
    checkpoint = stock_checkpoint(state, dense, plain(stock_transformer_args(model_args)), data, args.checkpoint)
    quantization = args.quantization or "float32"
    with written_in_place(args.out) as path:
        if ctranslate2:
            to_ctranslate2(checkpoint, data, path, quantization)
        else:
            torch.save(checkpoint, path)
    return {
        "checkpoint": args.checkpoint,
        "arch": model_args.arch,
        "out": args.out,
        "format": args.format,
        **({"quantization": quantization} if ctranslate2 else {}),
        "parameters": {"hypercomplex": before.as_dict(), "exported": count_parameters(dense).as_dict()},
        "bytes": {"checkpoint": os.path.getsize(args.checkpoint), "out": disk_bytes(args.out)},
    }


def format_report(report: dict) -> str:
    params, size = report["parameters"], report["bytes"]
    what = (
        "CTranslate2 model, " + report["quantization"] if report["format"] == "ctranslate2" else "fairseq transformer"
    )
    return "\n".join(
        [
            f"{report['checkpoint']} ({report['arch']}) -> {report['out']} ({what})",
            f"parameters: {params['hypercomplex']['total']:,} -> {params['exported']['total']:,} "
            f"(without embeddings {params['hypercomplex']['without_embeddings']:,} -> "
            f"{params['exported']['without_embeddings']:,})",
            f"on disk: {size['checkpoint']:,} -> {size['out']:,} bytes",
        ]
    )


def main(argv=None) -> int:
    def work(args):
        report = export(args)
        print(json.dumps(report) if args.json else format_report(report))

    return command.main("phm-export", parse_args, work, argv)


if __name__ == "__main__":
    sys.exit(main())
