"""phm-fairseq: the models of Zhang et al. (ICLR 2021) for fairseq, built from the PHM and quaternion
layers of ``phm_layers`` (plain PyTorch, no fairseq: use that package for the layers alone).

``import phm_fairseq``, or fairseq's ``--user-dir phm_fairseq`` (the hub interface's ``user_dir``),
imports fairseq and registers the plugin's models, tasks and criterions, as fairseq's own
examples/linformer does. Importing it changes two things beyond fairseq's registries, both for the
plugin's checkpoints and training:

- torch's safe loading allows the classes that fairseq's checkpoints hold (``checkpoints.py``);
- fairseq's ``Trainer._build_optimizer`` is wrapped (``models/training.py``), so that fairseq-train
  splits its optimizer by the lr and weight-decay scales of the PHM factors; a model without scales
  (and without --log-parameter-stats) gets fairseq's optimizer as it was.
"""

import os

__version__ = "0.1.0"

PLUGIN_DIR = os.path.dirname(os.path.abspath(__file__))
"""The plugin's package folder: fairseq's --user-dir (fairseq accepts it once the plugin is
imported only as an entry of ``phm_fairseq.__path__``, which this is)."""

from . import checkpoints, criterions, models, tasks  # noqa: E402, F401  (registers with fairseq)
