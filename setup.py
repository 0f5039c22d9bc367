"""phm-fairseq: PHM (1/n-parameter) and quaternion layers and models as a fairseq plugin.

fairseq itself is installed separately from the ``ve-fairseq`` wheel with ``--no-deps``
(its metadata asks for torchaudio, which would replace a CPU torch by a CUDA build);
``scripts/install.sh`` does that. Everything else the plugin needs at run time is declared here.
"""

import re
from pathlib import Path

from setuptools import find_packages, setup

# The version is written once, in the package (phm_fairseq.__version__); read, not imported (that needs torch).
VERSION = re.search(r'^__version__ = "([^"]+)"$', Path("phm_fairseq/__init__.py").read_text(), re.M).group(1)

# the reproduction kit's needs (phm_experiments: configs, reports and plots)
EXPERIMENTS = ["matplotlib", "pydantic>=2", "pyyaml"]

setup(
    name="phm-fairseq",
    version=VERSION,
    description="PHM and quaternion layers and models (Zhang et al., ICLR 2021) as a fairseq plugin",
    long_description=open("README.md", encoding="utf-8").read(),
    long_description_content_type="text/markdown",
    license="MIT",
    python_requires=">=3.11,<3.13",
    # the layers (plain PyTorch), the plugin, and beside it the reproduction kit (phm-run, phm-collect),
    # which needs the extra below
    packages=find_packages(
        include=["phm_layers", "phm_layers.*", "phm_fairseq", "phm_fairseq.*", "phm_experiments", "phm_experiments.*"]
    ),
    install_requires=[
        "torch>=2.1",
        # fairseq's own runtime needs (ve-fairseq is installed with --no-deps)
        "bitarray",
        "cffi",
        "cython",
        "hydra-core>=1.3.2",
        "numpy>=1.21.3",
        "omegaconf>=2.3",
        "packaging",
        "regex",
        "sacrebleu>=2.0",
        "scikit-learn",
        "tqdm",
        # fairseq-generate's --tokenizer moses and --bpe subword_nmt / sentencepiece, and data-prep/
        "sacremoses",
        "sentencepiece",
        "subword-nmt",
        # fairseq's --tensorboard-logdir (without it fairseq asks for it on every command)
        "tensorboardX",
    ],
    extras_require={
        "experiments": EXPERIMENTS,
        # phm-export --format ctranslate2 (CPU wheels on PyPI); the tests convert a tiny model
        "export": ["ctranslate2"],
        # pytest-xdist runs the suite on every core (make test); filelock: the fixtures its workers share
        "test": ["pytest", "pytest-xdist", "filelock", "ruff", "ctranslate2", *EXPERIMENTS],
    },
    entry_points={
        "console_scripts": [
            "phm-params = phm_fairseq.cli.params:main",
            "phm-evaluate = phm_fairseq.cli.evaluate:main",
            "phm-run = phm_experiments.cli.run:main",
            "phm-collect = phm_experiments.cli.collect:main",
            "phm-compress = phm_fairseq.cli.compress:main",
            "phm-export = phm_fairseq.cli.export:main",
        ]
    },
    classifiers=[
        "Programming Language :: Python :: 3.11",
        "Programming Language :: Python :: 3.12",
        "Topic :: Scientific/Engineering :: Artificial Intelligence",
    ],
)
