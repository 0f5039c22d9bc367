"""The plugin's fairseq models (registered on import)."""

import fairseq  # noqa: F401  (first: the plugin registers whole before these modules import one another)

from . import lstm_nli, training, transformer, transformer_classifier  # noqa: F401

training.install()  # fairseq's Trainer splits its optimizer by the layers' lr scales (training.py)
