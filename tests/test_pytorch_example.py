"""docs/pytorch.md's example, the layers in a torch.nn.TransformerEncoder outside fairseq, runs as the page
prints it: in a fresh interpreter that imports neither fairseq nor the plugin, and the model learns."""

import json
import re
import subprocess
import sys
from pathlib import Path

DOC = Path(__file__).resolve().parent.parent / "docs" / "pytorch.md"

# each loss the example computes, recorded around torch's mse_loss (the example's own code runs unchanged)
RECORD = r"""
import torch.nn.functional
losses, mse_loss = [], torch.nn.functional.mse_loss
torch.nn.functional.mse_loss = lambda *args, **kwargs: losses.append(mse_loss(*args, **kwargs)) or losses[-1]
"""

CHECKS = r"""
import json, sys
from phm_layers import PHMLinear
print(json.dumps({
    "phm": [isinstance(m, PHMLinear) for block in model.layers for m in (block.linear1, block.linear2)],
    "losses": [loss.item() for loss in losses],
    "imported": sorted({name.split(".")[0] for name in sys.modules} & {"fairseq", "phm_fairseq", "hydra"}),
}))
"""


def test_the_pytorch_page_example_trains_a_torch_transformer_without_fairseq():
    (block,) = re.findall(r"^```python\n(.*?)^```$", DOC.read_text(), flags=re.M | re.S)
    assert len(block.strip().splitlines()) <= 20, "a short example"
    out = subprocess.run([sys.executable, "-c", RECORD + block + CHECKS], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    found = json.loads(out.stdout.strip().splitlines()[-1])
    assert found["phm"] == [True] * 4
    assert len(found["losses"]) == 20 and found["losses"][-1] < found["losses"][0]
    assert found["imported"] == []
    total, dense = re.search(r"# total=(\d+) against dense_total=(\d+)", block).groups()  # the comment's figures
    assert f"total={total}, trainable={total}, embeddings=0, dense_total={dense})" in out.stdout
