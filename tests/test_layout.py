"""The plugin does what it must and nothing more: importing it registers its models, tasks and
criterions, allows argparse.Namespace in torch's safe loading (docs/troubleshooting.md says why),
and wraps fairseq's Trainer._build_optimizer (the layers' lr scales, models/training.py); it changes
nothing else in the process. It needs neither the reproduction kit nor the kit's
extra (pyyaml, matplotlib): the dependency points one way."""

import ast
import json
import subprocess
import sys
from pathlib import Path

import phm_fairseq
from phm_fairseq.checkpoints import INSTRUCTION

PLUGIN = Path(phm_fairseq.__file__).parent

# the process-wide state an import could change, before and after `import phm_fairseq`; fairseq's
# own modules are imported first (their import configures logging, registers fairseq's models, ...).
# The reproduction kit and its extra are blocked: the plugin and its commands must not need them
SNAPSHOT = r"""
import argparse, atexit, json, logging, signal, sys, threading, warnings
for name in ("phm_experiments", "matplotlib"):
    sys.modules[name] = None
import torch
import fairseq, fairseq.criterions, fairseq.models, fairseq.models.transformer, fairseq.tasks
import fairseq.checkpoint_utils, fairseq.modules, fairseq.trainer, fairseq.optim
from torch.optim import optimizer
from fairseq.criterions import CRITERION_REGISTRY
from fairseq.models import ARCH_MODEL_REGISTRY
from fairseq.tasks import TASK_REGISTRY

def state():
    root = logging.getLogger()
    return {
        "optimizer hooks": [len(optimizer._global_optimizer_pre_hooks), len(optimizer._global_optimizer_post_hooks)],
        "atexit callbacks": atexit._ncallbacks(),
        "threading exit hooks": len(getattr(threading, "_threading_atexits", [])),
        "threads": threading.active_count(),
        "signal handlers": [str(signal.getsignal(s)) for s in (signal.SIGINT, signal.SIGTERM)],
        "torch": [str(torch.get_default_dtype()), torch.get_num_threads(), torch.is_grad_enabled()],
        "logging": [root.level, len(root.handlers)],
        "warning filters": len(warnings.filters),
        "safe globals": sorted(f"{g.__module__}.{g.__qualname__}" for g in torch.serialization.get_safe_globals()),
        "sys.path": list(sys.path),
        "import finders": [repr(finder) for finder in sys.meta_path],
        "Trainer._build_optimizer wrapped": hasattr(fairseq.trainer.Trainer._build_optimizer, "prepares_phm_optimizer"),
    }

before = state()
registries = {"archs": ARCH_MODEL_REGISTRY, "tasks": TASK_REGISTRY, "criterions": CRITERION_REGISTRY}
known = {kind: set(registry) for kind, registry in registries.items()}
import phm_fairseq
after = state()
import phm_fairseq.cli.params, phm_fairseq.cli.evaluate, phm_fairseq.cli.compress
from phm_fairseq.modules import PHMLinear
new = {kind: sorted(set(registry) - known[kind]) for kind, registry in registries.items()}
shape = list(PHMLinear(8, 8, n=2).to_dense().weight.shape)
print(json.dumps({"before": before, "after": after, "new": new, "dense shape": shape}))
"""


def test_importing_the_plugin_registers_it_and_changes_nothing_else():
    """One fresh interpreter: the state before and after, what it registered, and its commands' imports
    with the reproduction kit and matplotlib blocked."""
    out = subprocess.run([sys.executable, "-c", SNAPSHOT], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    found = json.loads(out.stdout.strip().split("\n")[-1])
    before, after = found["before"], found["after"]
    allowed = set(after.pop("safe globals")) - set(before.pop("safe globals"))
    assert [before.pop("Trainer._build_optimizer wrapped"), after.pop("Trainer._build_optimizer wrapped")] == [
        False,
        True,
    ]
    # fairseq's checkpoints keep argparse.Namespace, and numpy arrays of numbers with --eval-bleu; the
    # plugin's earlier checkpoints, PluginModelArgs
    numpy_classes = {"numpy._core.multiarray._reconstruct", "numpy.ndarray", "numpy.dtype"}
    numpy_classes |= {f"numpy.dtypes.{kind}DType" for kind in ("Bool", "Int32", "Int64", "Float32", "Float64")}
    assert allowed == {"argparse.Namespace", f"phm_fairseq.checkpoints.{INSTRUCTION}", *numpy_classes}
    assert after == before  # no import hook among them (sys.meta_path)
    new = found["new"]
    assert {"phm_transformer_demo", "quaternion_transformer_demo", "transformer_twin_demo", "phm_lstm_nli"} <= set(
        new["archs"]
    )
    assert {"nli", "sentence_classification"} <= set(new["tasks"]) and "classification" in new["criterions"]
    assert found["dense shape"] == [8, 8], "the commands and the layers work without the kit"


def imported_modules(folder: Path) -> set:
    names = set()
    for path in folder.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                names |= {alias.name.split(".")[0] for alias in node.names}
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names.add(node.module.split(".")[0])
    return names


def test_the_plugin_imports_nothing_of_the_kit_nor_its_extra():
    # (not pyyaml: omegaconf, which fairseq needs, needs it too); at run time: the snapshot above
    assert not imported_modules(PLUGIN) & {"phm_experiments", "yaml", "matplotlib", "benchmarks"}
