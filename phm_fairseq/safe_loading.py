"""Safe loading of fairseq checkpoints under torch >= 2.6 (``torch.load(weights_only=True)``).

fairseq keeps the training arguments in its checkpoints as an ``argparse.Namespace`` (argparse
models and tasks, e.g. all of this plugin's), which the weights-only unpickler refuses: fairseq-
generate, fairseq-validate, resuming training and phm-evaluate would fail. This allows exactly
the classes fairseq checkpoints need and nothing else; loading never falls back to unsafe mode.
"""

import argparse

import torch

CHECKPOINT_GLOBALS = [argparse.Namespace]


def allow_fairseq_checkpoint_classes() -> None:
    add_safe_globals = getattr(torch.serialization, "add_safe_globals", None)
    if add_safe_globals is not None:  # torch < 2.4 has no weights-only default to satisfy
        add_safe_globals(CHECKPOINT_GLOBALS)


allow_fairseq_checkpoint_classes()
