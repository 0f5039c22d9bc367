"""Checkpoint averaging: the mean of the weights of a training's last epoch checkpoints, as one
fairseq checkpoint (the paper averages checkpoints; the fairseq wheel has no
scripts/average_checkpoints.py).

Every floating-point tensor of the model is averaged (accumulated in float64, stored in its own
dtype); any other entry (an integer buffer) must be equal in every checkpoint and is kept. Names
that share one tensor in the checkpoint (tied embeddings and output projection) share one average,
so the file holds it once, as the checkpoint does. The rest of the file is the last checkpoint's
(cfg, extra_state, optimizer_history), less its optimizer state, which no evaluation reads.
"""

from pathlib import Path

from .run_folder import EPOCH_CHECKPOINT


class AveragingError(RuntimeError):
    pass


def epoch_checkpoints(folder: Path) -> list:
    """fairseq's end-of-epoch checkpoints (checkpointN.pt) in ``folder``, by epoch."""
    found = [
        (int(m.group(1)), p) for p in Path(folder).glob("checkpoint*.pt") if (m := EPOCH_CHECKPOINT.fullmatch(p.name))
    ]
    return [path for _epoch, path in sorted(found)]


def last_epoch_checkpoints(folder: Path, count: int) -> list:
    saved = epoch_checkpoints(folder)
    if len(saved) < count:
        raise AveragingError(
            f"averaging the last {count} epoch checkpoints: {folder} holds {len(saved)} "
            f"({', '.join(p.name for p in saved) or 'none'}); train with fairseq's end-of-epoch checkpoints "
            f"(no --no-epoch-checkpoints) and --keep-last-epochs {count} or more, for {count} epochs or more"
        )
    return saved[-count:]


def average_checkpoints(paths: list, out: Path) -> Path:
    """Writes the average of the fairseq checkpoints ``paths`` to ``out`` (whole or not at all)."""
    import torch

    import phm_fairseq.checkpoints  # noqa: F401  (safe loading of the plugin's checkpoints)

    if not paths:
        raise AveragingError("no checkpoints to average")
    sums, state = {}, None
    for path in paths:
        state = torch.load(path, map_location="cpu", weights_only=True)
        model = state["model"]
        if sums and set(model) != set(sums):
            raise AveragingError(f"{path}: its weights are not those of {paths[0]} (another model?)")
        for name, tensor in model.items():
            if tensor.is_floating_point():
                sums[name] = sums[name] + tensor.double() if name in sums else tensor.double()
            elif name in sums and not torch.equal(sums[name], tensor):
                raise AveragingError(
                    f"{path}: {name} ({tensor.dtype}) differs from {paths[0]}'s: it cannot be averaged"
                )
            else:
                sums[name] = tensor
    averages = {}  # one per tensor of the last checkpoint: names tied to one tensor stay tied
    for name, tensor in state["model"].items():
        if tensor.is_floating_point():
            key = same_tensor(tensor)
            if key not in averages:
                averages[key] = (sums[name] / len(paths)).to(tensor.dtype)
            state["model"][name] = averages[key]
    state["last_optimizer_state"] = None
    out = Path(out)
    partial = out.with_name(f".{out.name}.partial")
    torch.save(state, partial)
    partial.replace(out)
    return out


def same_tensor(tensor) -> tuple:
    """What makes two entries of a loaded state dict one tensor: the same view of the same storage."""
    return (tensor.untyped_storage().data_ptr(), tensor.storage_offset(), tuple(tensor.shape), tensor.stride())
