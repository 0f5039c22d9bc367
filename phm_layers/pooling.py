"""Sentence vectors from the states of an encoder: mean- and max-pooling over real tokens only."""

import torch
from torch import Tensor


def mean_pool(states: Tensor, padding_mask: Tensor) -> Tensor:
    """mean_t h_t over the tokens that are not padding.

    states (batch, time, features), padding_mask (batch, time), True at padding.
    Returns (batch, features). Every sequence must have at least one token.
    """
    keep = (~padding_mask).unsqueeze(-1).to(states.dtype)
    lengths = keep.sum(dim=1)
    if bool((lengths == 0).any()):
        raise ValueError("a sequence of the batch has no tokens (all padding): there is nothing to pool")
    return (states * keep).sum(dim=1) / lengths


def max_mean_pool(states: Tensor, padding_mask: Tensor) -> Tensor:
    """[max_t h_t ; mean_t h_t] over the tokens that are not padding; (batch, 2 * features)."""
    mean = mean_pool(states, padding_mask)
    maximum = states.masked_fill(padding_mask.unsqueeze(-1), float("-inf")).amax(dim=1)
    return torch.cat([maximum, mean], dim=-1)
