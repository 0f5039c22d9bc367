"""criterions of the plugin, registered with fairseq on import."""

from . import classification  # noqa: F401
