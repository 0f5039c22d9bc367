"""Sentence vectors from the states of an encoder: max- and mean-pooling over real tokens only."""

import torch
from torch import Tensor


def max_mean_pool(states: Tensor, padding_mask: Tensor) -> Tensor:
    """[max_t h_t ; mean_t h_t] over the tokens that are not padding.

    states (batch, time, features), padding_mask (batch, time), True at padding.
    Returns (batch, 2 * features). Every sequence must have at least one token.
    """
    keep = (~padding_mask).unsqueeze(-1).to(states.dtype)
    lengths = keep.sum(dim=1)
    if bool((lengths == 0).any()):
        raise ValueError("max_mean_pool: a sequence of the batch has no tokens (all padding)")
    maximum = states.masked_fill(padding_mask.unsqueeze(-1), float("-inf")).amax(dim=1)
    mean = (states * keep).sum(dim=1) / lengths
    return torch.cat([maximum, mean], dim=-1)
