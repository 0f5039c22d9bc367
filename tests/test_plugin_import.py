"""Importing the layers imports neither fairseq nor the models and leaves logging alone; the plugin
registers with fairseq whenever fairseq arrives, in whatever order a script imports the two; and a
checkpoint loaded without the plugin fails as docs/translation.md says."""

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import phm_fairseq

REPO = Path(__file__).resolve().parent.parent
FIXTURES = REPO / "tests" / "fixtures" / "checkpoints"

# A fresh interpreter: the layers first (as a script that only wants them); then one of the plugin's
# tasks, whose import imports fairseq, and with it the plugin's models, which import the tasks (whole,
# or an import cycle fails); then fairseq's hub interface's user_dir (fairseq.utils.import_user_module,
# which imports nothing of a plugin already in sys.modules); then the old checkpoints of tests/fixtures.
LAYERS_FIRST = r"""
import json, logging, sys
import torch
root = logging.getLogger()
logging_state = lambda: [root.level, [repr(h) for h in root.handlers], logging.root.manager.disable]
before = logging_state()

from phm_fairseq.modules import HypercomplexLSTM, PHMLinear
PHMLinear(8, 16, n=2)(torch.randn(3, 8))
after = logging_state()
imported = sorted({name.split(".")[0] for name in sys.modules} & {"fairseq", "fairseq_cli", "hydra", "omegaconf"})
plugin = sorted(name for name in sys.modules if name.startswith("phm_fairseq."))

from phm_fairseq.tasks.classification import ClassificationTask

import argparse
from fairseq import checkpoint_utils, utils
from fairseq.criterions import CRITERION_REGISTRY
from fairseq.models import ARCH_MODEL_REGISTRY
from fairseq.tasks import TASK_REGISTRY
utils.import_user_module(argparse.Namespace(user_dir=sys.argv[1]))
registered = [name in registry for name, registry in [
    ("phm_transformer_demo", ARCH_MODEL_REGISTRY), ("phm_lstm_nli", ARCH_MODEL_REGISTRY),
    ("transformer_twin_demo", ARCH_MODEL_REGISTRY), ("nli", TASK_REGISTRY),
    ("sentence_classification", TASK_REGISTRY), ("classification", CRITERION_REGISTRY)]]
loaded = {}
for name, data in json.loads(sys.argv[2]).items():
    models, _cfg, _task = checkpoint_utils.load_model_ensemble_and_task([name], arg_overrides={"data": data})
    loaded[name] = type(models[0]).__name__
print(json.dumps({"logging": [before, after], "imported": imported, "plugin": plugin, "registered": registered,
                  "loaded": loaded}))
"""


def test_the_layers_import_alone_and_the_plugin_registers_when_fairseq_arrives():
    checkpoints = {
        str(FIXTURES / f"{name}.pt"): str(FIXTURES / "data" / data)
        for name, data in [("phm_fused", "translation"), ("phm_lstm_nli", "nli"), ("phm_classifier", "sentence")]
    }
    out = subprocess.run(
        [sys.executable, "-c", LAYERS_FIRST, phm_fairseq.PLUGIN_DIR, json.dumps(checkpoints)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    found = json.loads(out.stdout.strip().splitlines()[-1])
    before, after = found["logging"]
    assert after == before, "the layers' import changed no logger, level or handler"
    assert found["imported"] == [], "no fairseq (nor its hydra and omegaconf) for the layers"
    assert not any(name.startswith(("phm_fairseq.models", "phm_fairseq.tasks")) for name in found["plugin"])
    assert all(found["registered"]), "models, tasks and the criterion, once fairseq is imported"
    assert sorted(found["loaded"].values()) == [
        "HypercomplexTransformerModel",
        "LSTMNLIModel",
        "TransformerClassifierModel",
    ]


def documented_refusal() -> str:
    """The error that docs/translation.md quotes for a checkpoint loaded without the plugin."""
    text = (REPO / "docs" / "translation.md").read_text()
    section = text.split("## Checkpoints", 1)[1].split("\n## ", 1)[0]
    quoted = re.search(r"with torch's `([^`]+)`", section)
    assert quoted, "docs/translation.md's Checkpoints section quotes the error"
    return " ".join(quoted.group(1).split())


def test_the_documented_error_is_what_loading_without_the_plugin_says(tmp_path):
    """fairseq's torch.load in a process without the plugin fails with torch's refusal of
    argparse.Namespace, which docs/translation.md quotes: the checkpoints hold no class of the plugin
    (an old fixture, its model arguments a plain Namespace as fairseq-train saves them today)."""
    import argparse
    import pickle

    from fairseq import checkpoint_utils

    state = torch.load(FIXTURES / "phm_fused.pt", weights_only=True)
    state["cfg"]["model"] = argparse.Namespace(**vars(state["cfg"]["model"]))
    torch.save(state, tmp_path / "checkpoint.pt")
    allowed = torch.serialization.get_safe_globals()
    torch.serialization.clear_safe_globals()  # a process that never imported the plugin
    try:
        with pytest.raises(pickle.UnpicklingError) as refusal:
            checkpoint_utils.load_checkpoint_to_cpu(str(tmp_path / "checkpoint.pt"))
    finally:
        torch.serialization.add_safe_globals(allowed)
    assert documented_refusal() in str(refusal.value)
