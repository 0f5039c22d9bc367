"""The layers are their own package, ``phm_layers``: importing it imports neither fairseq nor the plugin and
changes nothing process-wide (logging, global hooks, Parameter classes). ``import phm_fairseq`` registers the
plugin with fairseq, the plain way (its __init__ imports its models, tasks and criterions:
tests/test_layout.py), and so do fairseq-train's --user-dir and the hub interface's user_dir. The layers'
old import path, phm_fairseq.modules, names the same modules and classes (pickles of old objects load). A
checkpoint loaded without the plugin fails as docs/translation.md says."""

import json
import pickle
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from conftest import TINY_FLAGS, console, copy_task_files, run_command

import phm_fairseq
import phm_layers

REPO = Path(__file__).resolve().parent.parent
FIXTURES = REPO / "tests" / "fixtures" / "checkpoints"

# A fresh interpreter: the layers alone first (as a script that only wants them), then fairseq's hub
# interface with user_dir, which imports the plugin into a process where fairseq was not imported yet.
LAYERS_THEN_HUB = r"""
import json, logging, sys
import torch
root = logging.getLogger()
logging_state = lambda: [root.level, [repr(h) for h in root.handlers], logging.root.manager.disable]
opt, mod = sys.modules["torch.optim.optimizer"], sys.modules["torch.nn.modules.module"]
names = lambda m: [name for name in dir(m) if name.startswith("_global_") and name.endswith("hooks")]
hooks = lambda: [sorted(getattr(m, name)) for m in (opt, mod) for name in names(m)]
before = logging_state(), hooks(), torch.nn.Parameter.__subclasses__()

from phm_layers import HypercomplexLSTM, PHMLinear
layer = PHMLinear(8, 16, n=2)
layer(torch.randn(3, 8))
after = logging_state(), hooks(), torch.nn.Parameter.__subclasses__()
factors = [type(layer.A) is torch.nn.Parameter, type(layer.S) is torch.nn.Parameter]
imported = sorted({name.split(".")[0] for name in sys.modules} & {"fairseq", "fairseq_cli", "hydra", "omegaconf"})
plugin = sorted(name for name in sys.modules if name.startswith("phm_fairseq"))

from fairseq.models.transformer import TransformerModel
hub = TransformerModel.from_pretrained(sys.argv[1], checkpoint_file="phm_fused.pt", data_name_or_path=sys.argv[2],
                                       user_dir=sys.argv[3])
print(json.dumps({"state": [repr(before), repr(after)], "factors": factors, "imported": imported, "plugin": plugin,
                  "hub": type(hub.models[0]).__name__}))
"""


def fresh_python(code, *argv):
    out = subprocess.run([sys.executable, "-c", code, *map(str, argv)], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_the_layers_import_alone_and_the_hub_interface_registers_the_plugin_after_them():
    found = fresh_python(LAYERS_THEN_HUB, FIXTURES, FIXTURES / "data" / "translation", phm_fairseq.PLUGIN_DIR)
    before, after = found["state"]
    assert after == before, "the layers changed no logger, level or handler, global hook or Parameter class"
    assert found["factors"] == [True, True], "the factors are plain Parameters"
    assert found["imported"] == [], "no fairseq (nor its hydra and omegaconf) for the layers"
    assert found["plugin"] == [], "nor the plugin"
    assert found["hub"] == "HypercomplexTransformerModel"


@pytest.mark.slow
def test_fairseq_train_with_the_user_dir_trains_a_plugin_model(tmp_path):
    data = copy_task_files(tmp_path / "raw", {"train": 64, "valid": 8, "test": 8})
    command = [console("fairseq-train"), data, "--user-dir", "phm_fairseq", "--arch", "phm_transformer_demo"]
    command += ["--phm-n", "2", *TINY_FLAGS, "--optimizer", "adam", "--lr", "0.001", "--max-tokens", "256"]
    command += ["--max-update", "2", "--save-dir", tmp_path / "save", "--no-save", "--cpu", "--data-buffer-size", "0"]
    out = run_command("sh", "-c", 'cd "$0" && exec "$@"', REPO, *command)  # --user-dir relative to the repository
    log = out.stdout + out.stderr
    assert "HypercomplexTransformerModel" in log and "done training" in log, log[-3000:]


def test_the_old_import_path_names_the_same_modules_and_classes():
    import phm_fairseq.modules
    import phm_fairseq.modules.kronecker_decomposition
    import phm_fairseq.modules.phm_linear
    from phm_fairseq.modules import PHMLinear, derived_weight, linear_spec

    assert PHMLinear is phm_layers.PHMLinear and phm_fairseq.modules.__all__ == phm_layers.__all__
    assert phm_fairseq.modules.phm_linear is phm_layers.phm_linear and linear_spec is phm_layers.linear_spec
    assert derived_weight is phm_layers.derived_weight
    assert phm_fairseq.modules.kronecker_decomposition.fit_phm_layer is phm_layers.fit_phm_layer
    # a layer pickled by an earlier version names its class by the old path
    layer = phm_layers.PHMLinear(8, 4, n=2)
    old = pickle.dumps(layer, protocol=2).replace(b"phm_layers.", b"phm_fairseq.modules.")
    assert b"phm_fairseq.modules.phm_linear\nPHMLinear" in old and b"phm_layers" not in old
    loaded = pickle.loads(old)
    assert type(loaded) is phm_layers.PHMLinear
    x = torch.randn(3, 8)
    torch.testing.assert_close(loaded(x), layer(x))


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
