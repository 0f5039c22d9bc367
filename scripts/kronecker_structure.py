"""How much Kronecker structure a trained dense translation model has, and where it came from.

For each n, the relative Frobenius error ||W - H||_F / ||W||_F of the nearest sum of n
Kronecker products H (nearest_kronecker_sum, what phm-compress fits), pooled over the linear
maps of the encoder and decoder layers, for three matrices per map:

  W        the trained weight (the checkpoint)
  W0       its initialisation, rebuilt from the run's own fairseq-train command and seed
  W - W0   what training added

If W's error is no lower than W0's, training has given the weights no Kronecker structure that
phm-compress could keep. ``|W - W0| / |W|`` says how far training moved them; a value near
sqrt(2) would mean that the rebuilt W0 is not the run's initialisation.

    python scripts/kronecker_structure.py work/runs/small/compress/transformer/seed1 --n 2 4 8

RUN is a phm-run run directory (result.json holds the fairseq-train command; the checkpoint
is checkpoints/checkpoint_best.pt); run it from the directory that command was run in.
"""

import argparse
import json
import math
import shlex
import sys
from pathlib import Path

import torch


def initial_state(train_command: str) -> dict:
    """The model's state before its first update: fairseq-train's own steps up to build_model
    (seed the RNGs, set up the task, load the valid split, build the model)."""
    from fairseq import options, tasks, utils
    from fairseq.dataclass.utils import convert_namespace_to_omegaconf

    from phm_experiments.fairseq_train import training_arguments

    args = options.parse_args_and_arch(options.get_training_parser(), training_arguments(shlex.split(train_command)))
    cfg = convert_namespace_to_omegaconf(args)
    utils.import_user_module(cfg.common)
    utils.set_torch_seed(cfg.common.seed)
    task = tasks.setup_task(cfg.task)
    for split in cfg.dataset.valid_subset.split(","):
        task.load_dataset(split, combine=False, epoch=1)
    return task.build_model(cfg.model).state_dict()


def layer_weights(state: dict) -> list:
    """Names of the 2-D weights of the encoder and decoder layers (no embeddings, no output projection)."""
    return [
        key
        for key, value in state.items()
        if ".layers." in key and key.endswith(".weight") and value.dim() == 2 and key.startswith(("encoder", "decoder"))
    ]


def pooled_error(matrices: list, n: int) -> float:
    """sqrt(sum ||W - H||^2 / sum ||W||^2) over the matrices, H the nearest n-term Kronecker sum
    (nan where every matrix is 0)."""
    from phm_layers.kronecker_decomposition import nearest_kronecker_sum

    error = total = 0.0
    for weight in matrices:
        norm = weight.double().norm().item()
        error += (nearest_kronecker_sum(weight, n).relative_error * norm) ** 2
        total += norm**2
    return math.sqrt(error / total) if total > 0 else math.nan


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("run", type=Path, help="a phm-run run directory of a dense translation model")
    parser.add_argument("--n", type=int, nargs="+", default=[2, 4, 8])
    parser.add_argument("--checkpoint", default="checkpoints/checkpoint_best.pt", help="relative to RUN")
    args = parser.parse_args(argv)

    result = json.loads((args.run / "result.json").read_text())
    trained = torch.load(args.run / args.checkpoint, map_location="cpu", weights_only=False)["model"]
    init = initial_state(result["training"]["command"])
    keys = layer_weights(trained)
    if not keys:
        sys.exit(f"{args.run / args.checkpoint}: no encoder or decoder layer weights (not a dense translation model?)")
    W = [trained[key].float() for key in keys]
    W0 = [init[key].float() for key in keys]
    moved = math.sqrt(sum((w - w0).norm() ** 2 for w, w0 in zip(W, W0)) / sum(w.norm() ** 2 for w in W))
    print(f"{args.run}: {len(keys)} weight matrices, |W - W0| / |W| = {moved:.3f}")
    print(f"{'n':>3}  {'W':>6}  {'W0':>6}  {'W - W0':>7}   (relative error of the nearest n-term Kronecker sum)")
    for n in args.n:
        errors = [pooled_error(matrices, n) for matrices in (W, W0, [w - w0 for w, w0 in zip(W, W0)])]
        print(f"{n:>3}  {errors[0]:6.3f}  {errors[1]:6.3f}  {errors[2]:7.3f}")


if __name__ == "__main__":
    main()
