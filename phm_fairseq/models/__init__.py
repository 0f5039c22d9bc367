"""models of the plugin, registered with fairseq on import."""

from . import lstm_nli  # noqa: F401
