"""Pruning rules. Editable: this is the pruning algorithm.

Shipped algorithm: uniform layer-wise magnitude pruning. Every prunable tensor keeps its
floor((1 - sparsity) * numel) weights of largest absolute value; the rest are set to zero.
No calibration data, no weight updates.
"""
import math

import torch

from model import prunable_parameters


@torch.no_grad()
def keep_largest(scores: torch.Tensor, keep: int) -> torch.Tensor:
    """Boolean mask of the `keep` largest entries of `scores` (ties broken by position)."""
    order = torch.argsort(scores.flatten(), descending=True, stable=True)
    mask = torch.zeros(scores.numel(), dtype=torch.bool, device=scores.device)
    mask[order[:keep]] = True
    return mask.view_as(scores)


@torch.no_grad()
def magnitude_prune(model: torch.nn.Module, sparsity: float) -> dict:
    """Zero all but the largest-magnitude (1 - sparsity) of each prunable tensor; returns the masks."""
    masks = {}
    for name, w in prunable_parameters(model).items():
        mask = keep_largest(w.abs(), math.floor((1.0 - sparsity) * w.numel()))
        w.mul_(mask)
        masks[name] = mask
    return masks
