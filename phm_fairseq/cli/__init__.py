"""The plugin's console commands (phm-params, phm-run, phm-collect, phm-evaluate, phm-compress, phm-export)."""

import logging

# Importing fairseq's tasks sets the root logger to DEBUG (a logging.basicConfig call in its
# speech tasks), which would flood the commands' output with matplotlib's font search.
logging.getLogger("matplotlib").setLevel(logging.WARNING)
