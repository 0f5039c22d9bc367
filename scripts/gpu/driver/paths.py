"""Where the driver finds the repository it runs from, and the programs and lists of scripts/gpu."""

from pathlib import Path

GPU = Path(__file__).resolve().parent.parent  # scripts/gpu
REPO = GPU.parent.parent
