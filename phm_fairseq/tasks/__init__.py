"""tasks of the plugin, registered with fairseq on import."""

from . import nli, sentence_classification  # noqa: F401
