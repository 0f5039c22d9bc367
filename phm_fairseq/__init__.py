"""phm-fairseq: PHM and quaternion layers, and the models of Zhang et al. (ICLR 2021), for fairseq.

``fairseq-train --user-dir phm_fairseq`` (or ``import phm_fairseq``) registers the plugin's
models, tasks and criterions, stops fairseq's prefetch threads at exit (``clean_exit``) and lets
half-precision training on a CPU skip an overflowing step (``cpu_half_precision``). The
layers in ``phm_fairseq.modules`` are plain PyTorch and work without fairseq installed.
"""

__version__ = "0.1.0"

from . import modules  # noqa: F401

try:
    import fairseq  # noqa: F401
except ImportError:  # layers only: nothing to register with
    pass
else:
    from . import checkpoints, clean_exit, cpu_half_precision, criterions, models, tasks  # noqa: F401
