"""A causal LM's negative log-likelihood of token sequences, as the hidden graders measure it."""

from __future__ import annotations

import numpy as np
import torch


@torch.no_grad()
def nll(model: torch.nn.Module, tokens: np.ndarray, batch: int) -> np.ndarray:
    """Per-sequence mean -log p(x_t | x_<t), t = 1..T-1, as float64 [N], from `model(input_ids=...)
    .logits` in float64, `batch` sequences at a time (the batch is part of the measurement: a grader
    keeps the one its anchors were calibrated with)."""
    x = torch.from_numpy(tokens.astype(np.int64))
    device = next(model.parameters()).device
    out = []
    for i in range(0, len(x), batch):
        b = x[i : i + batch].to(device)
        logits = model(input_ids=b).logits[:, :-1].double()
        logp = torch.log_softmax(logits, dim=-1).gather(-1, b[:, 1:, None]).squeeze(-1)
        out.append((-logp).mean(1).cpu().numpy())
    return np.concatenate(out)
