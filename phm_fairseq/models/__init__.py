"""The plugin's fairseq models (registered on import)."""

from . import lstm_nli, transformer  # noqa: F401
