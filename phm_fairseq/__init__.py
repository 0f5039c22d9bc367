"""phm-fairseq: PHM and quaternion layers, and the models of Zhang et al. (ICLR 2021), for fairseq.

``fairseq-train --user-dir phm_fairseq`` (or ``import phm_fairseq``) registers the plugin's
models, tasks and criterions, and changes nothing else in the process. The layers in
``phm_fairseq.modules`` are plain PyTorch and work without fairseq installed.
"""

import os

__version__ = "0.1.0"

PLUGIN_DIR = os.path.dirname(os.path.abspath(__file__))
"""The plugin's package folder: fairseq's --user-dir (fairseq accepts it once the plugin is
imported only as an entry of ``phm_fairseq.__path__``, which this is)."""

from . import modules  # noqa: E402, F401

try:
    import fairseq  # noqa: F401
except ImportError:  # layers only: nothing to register with
    pass
else:
    from . import checkpoints, criterions, models, tasks  # noqa: F401  (register with fairseq)
