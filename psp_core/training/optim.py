"""Optimizers for the embedding table and gradient-norm clipping that handles sparse gradients.

* ``dense``: exact ``torch.optim.Adam`` over the whole table every step (fused kernel on CPU).
* ``sparse``: lazy Adam (:class:`LazyAdam`, the update of ``torch.optim.SparseAdam`` done with
  row gathers and scatters): only rows present in the sparse gradient have their moments and
  weights updated. Per step it touches a few thousand rows instead of the whole vocabulary,
  which is what makes CPU training practical.
"""

from __future__ import annotations

import math

import torch
from torch import nn


class LazyAdam(torch.optim.Optimizer):
    """Adam for sparse gradients that updates only the rows present in the gradient.

    The same update and state (``step``, ``exp_avg``, ``exp_avg_sq``) as
    ``torch.optim.SparseAdam``, computed on gathered rows (``index_select`` / ``index_copy_`` /
    ``index_add_``) instead of through sparse tensor arithmetic. Gradients must be sparse COO
    tensors over the first dimension (as ``nn.EmbeddingBag(sparse=True)`` produces).

    The rows are updated :data:`PIECE_ROWS` at a time through two buffers kept between steps:
    each piece's passes then stay in the core's cache, and no step asks the system for fresh
    pages: a cheaper step, with the same results bit for bit
    (benchmarks/RESULTS.md#train-profile).
    """

    #: rows gathered and updated at once (2 MiB of float32 moments at dim 1024)
    PIECE_ROWS = 512

    def __init__(self, params, lr: float = 1e-3, betas=(0.9, 0.999), eps: float = 1e-8):
        if lr <= 0 or eps <= 0 or not all(0 <= b < 1 for b in betas):
            raise ValueError(f"invalid LazyAdam settings lr={lr} betas={betas} eps={eps}")
        super().__init__(params, dict(lr=lr, betas=tuple(betas), eps=eps))
        self._pieces: dict[tuple, tuple[torch.Tensor, torch.Tensor]] = {}

    def _piece_buffers(self, param: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        key = (tuple(param.shape[1:]), param.dtype, param.device)
        if key not in self._pieces:
            shape = (self.PIECE_ROWS, *param.shape[1:])
            self._pieces[key] = tuple(param.new_empty(shape) for _ in range(2))
        return self._pieces[key]

    @torch.no_grad()
    def step(self, closure=None):
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        for group in self.param_groups:
            beta1, beta2 = group["betas"]
            for param in group["params"]:
                if param.grad is None:
                    continue
                if not param.grad.is_sparse:
                    raise RuntimeError("LazyAdam needs sparse gradients; use the dense optimizer")
                grad = param.grad.coalesce()
                rows, values = grad._indices()[0], grad._values()
                state = self.state[param]
                if not state:
                    state["step"] = 0
                    state["exp_avg"] = torch.zeros_like(param)
                    state["exp_avg_sq"] = torch.zeros_like(param)
                state["step"] += 1
                step = state["step"]
                step_size = group["lr"] * math.sqrt(1 - beta2**step) / (1 - beta1**step)
                first, second = self._piece_buffers(param)
                for start in range(0, len(rows), self.PIECE_ROWS):
                    piece = rows[start : start + self.PIECE_ROWS]
                    gradient = values[start : start + self.PIECE_ROWS]
                    size = len(piece)
                    exp_avg = torch.index_select(state["exp_avg"], 0, piece, out=first[:size])
                    exp_avg.lerp_(gradient, 1 - beta1)
                    exp_avg_sq = torch.index_select(
                        state["exp_avg_sq"], 0, piece, out=second[:size]
                    )
                    exp_avg_sq.mul_(beta2).addcmul_(gradient, gradient, value=1 - beta2)
                    state["exp_avg"].index_copy_(0, piece, exp_avg)
                    state["exp_avg_sq"].index_copy_(0, piece, exp_avg_sq)
                    update = exp_avg.div_(exp_avg_sq.sqrt_().add_(group["eps"]))
                    param.index_add_(0, piece, update, alpha=-step_size)
        return loss


def build_optimizer(model: nn.Module, kind: str, lr: float) -> torch.optim.Optimizer:
    params = list(model.parameters())
    if kind == "sparse":
        return LazyAdam(params, lr=lr)
    if kind == "dense":
        return torch.optim.Adam(params, lr=lr, fused=True)
    raise ValueError(f"unknown optimizer {kind!r}; expected 'sparse' or 'dense'")


def clip_gradient_norm(params: list[nn.Parameter], max_norm: float) -> float:
    """Scale gradients so their global L2 norm is at most ``max_norm``; returns the norm before.

    Sparse gradients are coalesced first (repeated rows summed), so the norm is the norm of the
    true gradient, exactly as for a dense one.
    """
    norms = []
    for param in params:
        if param.grad is None:
            continue
        if param.grad.is_sparse:
            param.grad = param.grad.coalesce()
            norms.append(torch.linalg.vector_norm(param.grad._values()))
        else:
            norms.append(torch.linalg.vector_norm(param.grad))
    if not norms:
        return 0.0
    total = torch.linalg.vector_norm(torch.stack(norms))
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
