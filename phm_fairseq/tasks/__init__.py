"""tasks of the plugin, registered with fairseq on import."""

import fairseq  # noqa: F401  (first: the plugin registers whole before these modules import one another)

from . import nli, sentence_classification  # noqa: F401
