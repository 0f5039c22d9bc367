"""Loading fairseq checkpoints on torch >= 2.6, which loads with weights_only=True.

fairseq keeps a legacy (argparse) model's arguments in its checkpoints as an
``argparse.Namespace``: a plain container of options, safe to rebuild. fairseq 0.12 calls
torch.load without weights_only, so without this module every such checkpoint, stock or the
plugin's, fails to load ("Unsupported global: GLOBAL argparse.Namespace"): the one process-wide
change the plugin makes on import is to allow that class (torch.serialization.add_safe_globals),
rather than falling back to unsafe loading (tests/test_translation.py shows what fails without it),
and the numpy arrays in which fairseq's --eval-bleu keeps its counts (tests/test_early_stopping.py).

The plugin's checkpoints hold no class of the plugin: torch and fairseq alone open them. Checkpoints
written by earlier versions kept the model's arguments as ``PluginModelArgs``, a Namespace subclass
pickled under a name that read as an instruction to load the plugin; it stays defined here so that
they keep loading.
"""

import argparse
import sys

import numpy
import torch

INSTRUCTION = (
    "This checkpoint needs the phm-fairseq plugin: pass --user-dir with the path of its "
    "phm_fairseq package, or import phm_fairseq first"
)


class PluginModelArgs(argparse.Namespace):
    """The model arguments of a checkpoint written by an earlier version of the plugin."""


# pickle found the class by module and qualified name: the instruction was its name.
PluginModelArgs.__name__ = PluginModelArgs.__qualname__ = INSTRUCTION
setattr(sys.modules[__name__], INSTRUCTION, PluginModelArgs)

torch.serialization.add_safe_globals([argparse.Namespace, PluginModelArgs])

# fairseq's --eval-bleu keeps its BLEU counts as numpy arrays in the checkpoint's metrics: without
# these, a training validated by BLEU cannot resume. An array is rebuilt from its dtype and bytes;
# what an object array holds goes through the same restricted unpickler.
NUMERIC_DTYPES = [
    type(numpy.dtype(kind)) for kind in (numpy.bool_, numpy.int32, numpy.int64, numpy.float32, numpy.float64)
]
torch.serialization.add_safe_globals([numpy.zeros(0).__reduce__()[0], numpy.ndarray, numpy.dtype, *NUMERIC_DTYPES])
