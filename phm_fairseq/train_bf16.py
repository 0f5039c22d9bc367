"""fairseq-train with mixed precision in bfloat16: fairseq's --amp, autocasting to bfloat16 instead of float16.

    python -m phm_fairseq.train_bf16 DATA --user-dir phm_fairseq --amp [fairseq-train options]

fairseq 0.12 has no bfloat16 path on GPUs: its --bf16 sets --tpu and then needs torch_xla, on a GPU as on a
CPU. Its --amp runs each training step's forward under ``torch.cuda.amp.autocast()``, whose dtype is float16;
this launcher is fairseq-train itself with that autocast in bfloat16 (on the CPU with --cpu, CPU autocast in
bfloat16). The weights, their gradients and the optimizer's state stay float32, as with --amp; bfloat16 has
float32's range, so the loss scaler that --amp keeps has nothing to catch. Validation and fairseq-generate
run as without it (float32, or --fp16 for generation). It works with fairseq's own multi-GPU launch (the
processes it spawns run the training through this module too) and under torchrun.
"""

import contextlib
import sys

import torch

# fairseq's half-precision modes: each excludes this one
OTHER_PRECISIONS = ("--fp16", "--memory-efficient-fp16", "--bf16", "--memory-efficient-bf16")


def bfloat16_autocast(enabled: bool = True, dtype=None, cache_enabled: bool = True):
    """What ``torch.cuda.amp.autocast(...)`` gives within ``bfloat16_amp()``: autocast in bfloat16 on the
    device that fairseq trains on (``dtype``, float16 by default there, is overridden)."""
    device = "cuda" if torch.cuda.is_available() else "cpu"
    return torch.autocast(device, dtype=torch.bfloat16, enabled=enabled, cache_enabled=cache_enabled)


@contextlib.contextmanager
def bfloat16_amp():
    """Within it, fairseq's --amp autocasts to bfloat16 (fairseq's training step looks up
    ``torch.cuda.amp.autocast`` at every step)."""
    original = torch.cuda.amp.autocast
    torch.cuda.amp.autocast = bfloat16_autocast
    try:
        yield
    finally:
        torch.cuda.amp.autocast = original


def train_in_bfloat16(cfg, **kwargs):
    """fairseq-train's main, under ``bfloat16_amp``: what fairseq runs in each process it trains in
    (a module-level function, so that the processes of a multi-GPU launch import it by name)."""
    from fairseq_cli import train

    with bfloat16_amp():
        return train.main(cfg, **kwargs)


def check_arguments(argv: list) -> None:
    """A clear error for a command line that would not train in bfloat16 autocast."""
    given = {arg.split("=", 1)[0] for arg in argv}
    if "--amp" not in given:
        raise SystemExit(
            "phm_fairseq.train_bf16: add --amp: bfloat16 mixed precision is fairseq's --amp with autocast "
            "in bfloat16 (without --amp, fairseq trains in float32)"
        )
    conflicting = [option for option in OTHER_PRECISIONS if option in given]
    if conflicting:
        raise SystemExit(
            f"phm_fairseq.train_bf16: {', '.join(conflicting)} cannot go with --amp in bfloat16: leave "
            f"{'it' if len(conflicting) == 1 else 'them'} out (fairseq's --bf16 needs a TPU)"
        )


def main(argv=None) -> None:
    argv = sys.argv[1:] if argv is None else list(argv)
    check_arguments(argv)
    from fairseq_cli import train  # noqa: F401, I001  (first, as in fairseq-train: it sets up the logging)
    from fairseq import options
    from fairseq.dataclass.utils import convert_namespace_to_omegaconf
    from fairseq.distributed import utils as distributed_utils

    args = options.parse_args_and_arch(options.get_training_parser(), input_args=argv)
    distributed_utils.call_main(convert_namespace_to_omegaconf(args), train_in_bfloat16)


if __name__ == "__main__":
    main()
