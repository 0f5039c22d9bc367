"""The plugin's fairseq models (registered on import)."""

from . import lstm_nli, transformer, transformer_classifier  # noqa: F401
