"""Half precision on CPU as far as fairseq 0.12 goes: --memory-efficient-fp16 training (the model itself in
float16, dynamic loss scaling), resuming it, and fairseq-generate --fp16. fairseq's --fp16 training needs
CUDA (FP16Optimizer), --amp is CUDA autocast and --bf16 needs torch_xla: none of them runs on a CPU."""

import math
import re

import pytest
from conftest import ARCHS, assert_trained_in_half_precision, fairseq_generate, hypotheses, train

HALF = ["--cpu", "--memory-efficient-fp16", "--log-interval", "10"]
# the plugin's two kinds of structured map; the dense twin's maps are nn.Linear, fairseq's own concern
MODELS = {
    "PHM n=4": ARCHS["phm-n4-fused"],
    "quaternion": ["--arch", "quaternion_transformer_demo"],
}


@pytest.mark.slow
@pytest.mark.parametrize("name", list(MODELS))
def test_memory_efficient_fp16_trains_resumes_and_generates_on_cpu(copy_task, tmp_path, name):
    # phm-run's fairseq-train: a plain one stops at the first overflowing step on a CPU (below)
    result = train(copy_task, tmp_path, *MODELS[name], *HALF, "--max-update", "40", launcher=True)
    log = result.stdout + result.stderr
    assert_trained_in_half_precision(log, fall=0.8)
    # at the default --fp16-init-scale 128 the first step overflows here: fairseq alone stopped there on a CPU
    # ("Torch not compiled with CUDA enabled"); phm_experiments.cpu_half_precision skips the step, as on a GPU
    assert "NOTE: gradient overflow detected, ignoring gradient" in log
    last = tmp_path / "checkpoint_last.pt"

    resumed = train(copy_task, tmp_path, *MODELS[name], *HALF, "--max-update", "44", launcher=True)
    log = resumed.stdout + resumed.stderr
    assert f"Loaded checkpoint {last}" in log and re.search(r"num_updates[= ]44\b", log), log[-2000:]

    out = fairseq_generate(copy_task, last, "--fp16", "--cpu", "--batch-size", "32")
    assert sorted(hypotheses(out.stdout)) == list(range(64)), "every test sentence is translated"
    scores = [float(s) for s in re.findall(r"^H-\d+\t(\S+)\t", out.stdout, flags=re.M)]
    assert all(map(math.isfinite, scores)), scores
