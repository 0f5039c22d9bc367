"""fairseq 0.12 on a machine without CUDA: a half-precision training step that overflows is skipped, not fatal.

With ``--memory-efficient-fp16 --cpu`` (``--fp16`` needs CUDA) fairseq's dynamic loss scaler raises
OverflowError when the scaled gradients overflow; ``Trainer.train_step`` catches it to skip the step and
halve the scale, and then sets ``grad_norm = torch.tensor(0.0).cuda()``, which raises "Torch not compiled
with CUDA enabled" where there is no CUDA. So the first overflow, often one of the first steps at the default
``--fp16-init-scale 128``, ended the training. While a trainer takes a step on a machine without CUDA,
``Tensor.cuda()`` leaves a tensor where it is: there, any such call could only fail.

A change to fairseq's trainer, so not the plugin's to make on import: phm-run's trainings
(``python -m phm_experiments.fairseq_train``) install it; a plain fairseq-train stops as fairseq does.
"""

import functools

import torch
from fairseq.trainer import Trainer

_train_step = Trainer.train_step


def _where_it_is(tensor, *args, **kwargs):
    return tensor


@functools.wraps(_train_step)
def train_step(self, *args, **kwargs):
    if torch.cuda.is_available():
        return _train_step(self, *args, **kwargs)
    cuda = torch.Tensor.cuda
    torch.Tensor.cuda = _where_it_is
    try:
        return _train_step(self, *args, **kwargs)
    finally:
        torch.Tensor.cuda = cuda


def install() -> None:
    """Makes fairseq's Trainer skip an overflowing half-precision step on a machine without CUDA."""
    Trainer.train_step = train_step
