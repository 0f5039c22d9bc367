"""Safe loading of the plugin's fairseq checkpoints (torch >= 2.6 loads with weights_only=True).

fairseq keeps a legacy (argparse) model's arguments in its checkpoints as an
``argparse.Namespace``: a plain container of options, safe to rebuild, so it is allowed here
instead of falling back to unsafe loading.

The plugin's models keep those arguments as ``PluginModelArgs``, a Namespace subclass pickled
under a name that reads as an instruction. Without the plugin, fairseq fails on it with
``Unsupported global: GLOBAL phm_fairseq.checkpoints.This checkpoint needs the phm-fairseq
plugin: pass --user-dir ...``, instead of failing later on an unknown architecture.
"""

import argparse
import sys

import torch

INSTRUCTION = (
    "This checkpoint needs the phm-fairseq plugin: pass --user-dir with the path of its "
    "phm_fairseq package, or import phm_fairseq first"
)


class PluginModelArgs(argparse.Namespace):
    """The model arguments of a checkpoint trained with the plugin."""


# pickle finds a class by module and qualified name: give it the instruction as its name.
PluginModelArgs.__name__ = PluginModelArgs.__qualname__ = INSTRUCTION
setattr(sys.modules[__name__], INSTRUCTION, PluginModelArgs)

torch.serialization.add_safe_globals([argparse.Namespace, PluginModelArgs])


def mark_plugin_checkpoint(model_args) -> None:
    """Make checkpoints saved with these (fairseq-train) model arguments name the plugin."""
    if type(model_args) is argparse.Namespace:
        model_args.__class__ = PluginModelArgs
