"""The reproduction kit's console commands: phm-run and phm-collect."""

import logging

# Importing fairseq's tasks sets the root logger to DEBUG (a logging.basicConfig call in its
# speech tasks), which would flood the commands' output with matplotlib's font search.
logging.getLogger("matplotlib").setLevel(logging.WARNING)
