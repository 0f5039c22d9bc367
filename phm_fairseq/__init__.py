"""phm-fairseq: PHM and quaternion layers, and the models of Zhang et al. (ICLR 2021), for fairseq.

``fairseq-train --user-dir phm_fairseq`` (or ``import phm_fairseq``) registers the plugin's
models, tasks and criterions with fairseq and allows fairseq's checkpoints in torch's safe loading
(``checkpoints.py``); it changes nothing else in the process. Imported before fairseq, it registers
when fairseq is imported (a finder in sys.meta_path waits for it). The layers in
``phm_fairseq.modules`` are plain PyTorch: importing them imports neither fairseq nor the plugin's
models, and works without fairseq installed.
"""

import importlib.abc
import importlib.util
import os
import sys

__version__ = "0.1.0"

PLUGIN_DIR = os.path.dirname(os.path.abspath(__file__))
"""The plugin's package folder: fairseq's --user-dir (fairseq accepts it once the plugin is
imported only as an entry of ``phm_fairseq.__path__``, which this is)."""

from . import checkpoints  # noqa: E402, F401  (torch only)


def _register_with_fairseq():
    from . import criterions, models, tasks  # noqa: F401  (fairseq's --user-dir imports no criterions/)


class _RegisterWhenFairseqIsImported(importlib.abc.MetaPathFinder):
    """Registers the plugin as soon as fairseq is imported. It cannot wait for fairseq to ask: fairseq's
    --user-dir and the hub interface's user_dir import nothing of a plugin already in sys.modules (a
    script that imported the layers first), and it must not import fairseq itself for the layers."""

    def find_spec(self, name, path=None, target=None):
        if name != "fairseq":
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec(name)
        if spec is not None and spec.loader is not None:
            execute = spec.loader.exec_module

            def execute_then_register(module):
                execute(module)
                _register_with_fairseq()

            spec.loader.exec_module = execute_then_register
        return spec


if "fairseq" in sys.modules:
    _register_with_fairseq()
else:
    sys.meta_path.insert(0, _RegisterWhenFairseqIsImported())
