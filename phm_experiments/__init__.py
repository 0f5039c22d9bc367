"""The reproduction kit: the experiment runner behind phm-run and phm-collect (docs/experiments.md).

A package of its own beside the plugin: it needs the plugin (phm_fairseq), never the other way,
and the extra `pip install -e .[experiments]` (pyyaml, matplotlib).

- config.py: the config schema, ``extends``, checks of a single config (``load_config`` -> ``Config``)
- checks.py: every config checked before anything runs (fairseq's parsers, values no training can
  use, the model built and validated on one example)
- commands.py: running fairseq's and the configs' commands (output shown and kept in logs)
- logs.py: fairseq's ``--log-format json`` records
- fingerprint.py: the config values a run's checkpoints were trained with
- run_folder.py: a run's folder: the name of each of its files, its lock, what --force removes
- run.py: one run (config, folder, placeholders, teacher), which every step takes
- resume.py: what an earlier phm-run left: its record, checkpoints to resume, refuse (another config or
  other code trained them) or repair
- data.py, training.py, evaluation.py: the steps (prepare; distill, init, fairseq-train; scores)
- runner.py: the steps in order, teachers first -> result.json
- fairseq_train.py: fairseq-train with early stopping and batches that survive a resume
- averaging.py: the average of the last epoch checkpoints
- provenance.py: versions, machine and commit stored beside every figure
- distill.py: sequence-level distillation data from a teacher run
- results.py: result.json's schema (pydantic), written by phm-run and read by phm-collect, and its
  paths: relative to the working directory
- cli/: the phm-run and phm-collect commands
- report/: phm-collect: aggregate.py (the runs' seeds averaged into typed rows), tables.py (Markdown
  and CSV of the rows), plots.py, diagnostics.py (the parameter statistics by kind and the validation
  moves), width.py (the gap to the dense twin against the width)
"""

from .config import Config, ConfigError, expand, load_config  # noqa: F401
from .results import Result  # noqa: F401
