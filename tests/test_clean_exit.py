"""fairseq commands that load the plugin exit cleanly while fairseq's prefetch threads are still at work."""

import subprocess
import sys

# One prefetch thread busy in PyTorch when the program ends (without the plugin's exit hook this process
# aborted with "terminate called without an active exception" in 6 runs of 6), one blocked on its full
# queue (the usual state at the end of a run: the hook must stop it at once, not wait for its timeout).
PROGRAM = """
import threading
import time

import torch
from fairseq.data.iterators import BackgroundConsumer, BufferedIterator

import phm_fairseq  # noqa: F401  (as fairseq's --user-dir does)


class Batches:
    def __init__(self, work):
        self.work = work

    def __len__(self):
        return 1000

    def __iter__(self):
        x = torch.ones(64, 64)
        while True:
            for _ in range(self.work):
                x = (x @ x).clamp_(max=1.0)  # PyTorch releases the GIL in each op
            yield x.clone()


busy, blocked = BufferedIterator(100, Batches(work=300)), BufferedIterator(2, Batches(work=0))
next(busy), next(blocked)
while not blocked._queue.full():
    time.sleep(0.01)
consumers = [t for t in threading.enumerate() if isinstance(t, BackgroundConsumer)]
print(f"exiting with {len(consumers)} prefetch threads alive", flush=True)
"""


def test_exit_while_fairseq_prefetches_batches_is_clean():
    result = subprocess.run([sys.executable, "-c", PROGRAM], capture_output=True, text=True, timeout=300)
    assert "exiting with 2 prefetch threads alive" in result.stdout, result.stderr[-3000:]
    assert result.returncode == 0, result.stderr[-3000:]
    assert "terminate called" not in result.stderr and "did not stop" not in result.stderr, result.stderr[-3000:]
