"""The optimizer and its learning-rate schedule. Editable: this is the training algorithm.

Shipped algorithm: AdamW at a constant learning rate, no warmup, weight decay on every
parameter (embeddings, LayerNorm gains and biases included).
"""
import torch

LR = 3e-3            # best constant rate of {1.5e-3, 3e-3, 6e-3} at smoke (validation perplexity)
BETAS = (0.9, 0.95)
WEIGHT_DECAY = 0.1


def build_optimizer(model: torch.nn.Module) -> torch.optim.Optimizer:
    return torch.optim.AdamW(model.parameters(), lr=LR, betas=BETAS, weight_decay=WEIGHT_DECAY)


def lr_at(step: int, total_steps: int) -> float:
    """Learning rate for optimizer step `step` (0-based) of `total_steps`."""
    return LR
