"""Pretrained word vectors (GloVe text format, plain or gzip, any dimension) for a fairseq dictionary."""

import gzip
import logging
import os

import torch
from torch import nn

from phm_layers import LinearSpec

logger = logging.getLogger(__name__)

GLOVE_HINT = "bash data-prep/glove.sh puts GloVe 840B 300d in data-bin/glove/"


def _open_text(path: str):
    if not os.path.isfile(path):
        raise FileNotFoundError(f"--glove {path}: no such file ({GLOVE_HINT})")
    opener = gzip.open if path.endswith(".gz") else open
    return opener(path, "rt", encoding="utf-8", errors="strict")


def glove_dim(path: str) -> int:
    """The vector size of a GloVe file: the number of values on its first line."""
    with _open_text(path) as f:
        first = f.readline().rstrip("\n").split(" ")
    if len(first) < 2:
        raise ValueError(f"--glove {path}: line 1 is not 'word value value ...' (GloVe text format)")
    return len(first) - 1


def read_glove(path: str, words: list) -> tuple:
    """Vectors for ``words`` from a GloVe file: an exact match first, else the lowercased word.

    Returns ({index in ``words``: vector}, dim, how many were matched only by lowercasing).
    Only the lines of wanted words are parsed, so the 2.2M-line 840B file reads in one pass.
    """
    dim = glove_dim(path)
    wanted = {}
    for i, w in enumerate(words):
        wanted.setdefault(w, []).append((i, True))
        if w.lower() != w:
            wanted.setdefault(w.lower(), []).append((i, False))
    exact, lowercase = {}, {}
    with _open_text(path) as f:
        for number, line in enumerate(f, start=1):
            word = line[: line.find(" ")]
            if word not in wanted:
                continue
            values = line.rstrip().split(" ")[1:]
            if len(values) > dim:
                continue  # an entry whose word holds spaces (840B has ". . ." etc.): no dictionary word
            if len(values) < dim:
                raise ValueError(f"--glove {path}:{number}: {len(values)} values for {word!r}, expected {dim}")
            vector = torch.tensor([float(v) for v in values])
            for i, is_exact in wanted[word]:
                (exact if is_exact else lowercase).setdefault(i, vector)
    found = {**lowercase, **exact}
    return found, dim, len(found) - len(exact)


class WordVectors(nn.Module):
    """A (by default frozen) embedding table, projected to ``output_dim`` when its size differs."""

    def __init__(self, weight: torch.Tensor, padding_idx: int, output_dim: int, trainable: bool = False):
        super().__init__()
        self.embedding = nn.Embedding.from_pretrained(weight, freeze=not trainable, padding_idx=padding_idx)
        dim = weight.size(1)
        # The vectors' own size rarely divides by n: the projection is an ordinary linear map.
        self.projection = LinearSpec("dense").build(dim, output_dim) if dim != output_dim else None
        self.embedding_dim = output_dim

    def forward(self, tokens):
        x = self.embedding(tokens)
        return x if self.projection is None else self.projection(x)


def glove_embeddings(path: str, dictionary, output_dim: int, trainable: bool = False, dim: int = None) -> WordVectors:
    """GloVe vectors for every word of a fairseq ``dictionary``; coverage is logged.

    Words without a vector (and the special symbols) get random vectors of the found vectors'
    scale, the padding symbol zeros. With ``dim`` (from a checkpoint) the file is not read: the
    weights come from the checkpoint.
    """
    if dim is not None:
        return WordVectors(torch.zeros(len(dictionary), dim), dictionary.pad(), output_dim, trainable)
    specials = dictionary.nspecial
    # fairseq-preprocess pads the dictionary with never-seen "madeupword" entries: not words
    indices = [i for i in range(specials, len(dictionary)) if dictionary.count[i] > 0]
    found, dim, by_lowercase = read_glove(path, [dictionary[i] for i in indices])
    found = {indices[i]: v for i, v in found.items()}
    weight = torch.empty(len(dictionary), dim)
    scale = torch.stack(list(found.values())).std().item() if found else 1.0
    nn.init.normal_(weight, std=scale)
    for i, vector in found.items():
        weight[i] = vector
    weight[dictionary.pad()] = 0.0
    counts = dictionary.count
    covered_tokens = sum(counts[i] for i in found)
    total_tokens = max(sum(counts[i] for i in indices), 1)
    logger.info(
        f"GloVe {path}: {dim}-d vectors for {len(found)} of {len(indices)} dictionary words "
        f"({100.0 * len(found) / max(len(indices), 1):.1f}%, {by_lowercase} of them by lowercasing; "
        f"{100.0 * covered_tokens / total_tokens:.1f}% of the training tokens); "
        f"{'fine-tuned' if trainable else 'fixed'}"
        + (f"; projected {dim} -> {output_dim}" if dim != output_dim else "")
    )
    return WordVectors(weight, dictionary.pad(), output_dim, trainable)
