"""The reproduction kit: the experiment runner behind phm-run and phm-collect (docs/experiments.md).

A package of its own beside the plugin: it needs the plugin (phm_fairseq), never the other way,
and the extra `pip install -e .[experiments]` (pyyaml, matplotlib).

- config.py: the config schema, ``extends``, complete checking (``load_config`` -> ``Config``)
- commands.py: running fairseq's and the configs' commands (output shown and kept in logs);
  fairseq's own parsers on a config's options
- logs.py: fairseq's ``--log-format json`` records
- fingerprint.py: the config values a run's checkpoints were trained with
- runner.py: one run = prepare -> (teacher, distill, init) -> train -> evaluate -> result.json
- fairseq_train.py: fairseq-train with early stopping that survives a resume
- averaging.py: the average of the last epoch checkpoints
- provenance.py: versions, machine and commit stored beside every figure
- cli/: the phm-run and phm-collect commands
- distill.py: sequence-level distillation data from a teacher run
- evaluation.py: BLEU (fairseq-generate + sacrebleu) and accuracy (phm-evaluate)
- results.py: result.json's typed schema, written by phm-run and read by phm-collect
- report/: phm-collect: aggregate.py (the runs' seeds averaged into typed rows), tables.py (Markdown
  and CSV of the rows), plots.py
"""

from .config import Config, ConfigError, expand, load_config  # noqa: F401
from .results import Result  # noqa: F401
