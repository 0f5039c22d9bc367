"""tasks of the plugin, registered with fairseq on import."""

from . import nli  # noqa: F401
