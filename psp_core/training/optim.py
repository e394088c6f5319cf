"""Optimizers for the embedding table and gradient-norm clipping that handles sparse gradients.

* ``dense``: exact ``torch.optim.Adam`` over the whole table every step.
* ``sparse``: ``torch.optim.SparseAdam``, the "lazy" Adam: the encoder emits sparse gradients and
  only the rows used in the batch have their moments and weights updated. Per step it touches a
  few thousand rows instead of the whole vocabulary, which is what makes CPU training practical.
"""

from __future__ import annotations

import torch
from torch import nn


def build_optimizer(model: nn.Module, kind: str, lr: float) -> torch.optim.Optimizer:
    params = list(model.parameters())
    if kind == "sparse":
        return torch.optim.SparseAdam(params, lr=lr)
    if kind == "dense":
        return torch.optim.Adam(params, lr=lr)
    raise ValueError(f"unknown optimizer {kind!r}; expected 'sparse' or 'dense'")


def clip_gradient_norm(params: list[nn.Parameter], max_norm: float) -> float:
    """Scale gradients so their global L2 norm is at most ``max_norm``; returns the norm before.

    Sparse gradients are coalesced first (repeated rows summed), so the norm is the norm of the
    true gradient, exactly as for a dense one.
    """
    squares = []
    for param in params:
        if param.grad is None:
            continue
        if param.grad.is_sparse:
            param.grad = param.grad.coalesce()
            squares.append(param.grad._values().pow(2).sum())
        else:
            squares.append(param.grad.pow(2).sum())
    if not squares:
        return 0.0
    total = torch.stack(squares).sum().sqrt()
    if max_norm > 0:
        scale = max_norm / (total + 1e-6)
        if scale < 1:
            for param in params:
                if param.grad is None:
                    continue
                if param.grad.is_sparse:
                    param.grad._values().mul_(scale)
                else:
                    param.grad.mul_(scale)
    return float(total)
