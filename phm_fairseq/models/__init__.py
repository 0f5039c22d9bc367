"""The plugin's fairseq models (registered on import)."""

from . import transformer  # noqa: F401
