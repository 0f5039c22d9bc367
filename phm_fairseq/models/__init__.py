"""The plugin's fairseq models (registered on import)."""

import fairseq  # noqa: F401  (first: the plugin registers whole before these modules import one another)

from . import lstm_nli, transformer, transformer_classifier  # noqa: F401
