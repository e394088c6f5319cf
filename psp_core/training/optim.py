"""Optimizers for the embedding table and gradient-norm clipping that handles sparse gradients.

* ``dense``: exact ``torch.optim.Adam`` over the whole table every step (fused kernel on CPU).
* ``sparse``: lazy Adam (:class:`LazyAdam`, the update of ``torch.optim.SparseAdam`` done with
  row gathers and scatters): only rows present in the sparse gradient have their moments and
  weights updated. Per step it touches a few thousand rows instead of the whole vocabulary,
  which is what makes CPU training practical.
"""

from __future__ import annotations

import math
from collections import defaultdict

import torch
from torch import nn


class LazyAdam:
    """Adam for sparse gradients that updates only the rows present in the gradient.

    The same update and state (``step``, ``exp_avg``, ``exp_avg_sq``) as
    ``torch.optim.SparseAdam``, computed on gathered rows (``index_select`` / ``index_copy_`` /
    ``index_add_``) instead of through sparse tensor arithmetic. Gradients must be sparse COO
    tensors over the first dimension (as ``nn.EmbeddingBag(sparse=True)`` produces).

    The rows are updated :data:`PIECE_ROWS` at a time through two buffers kept between steps:
    each piece's passes then stay in the core's cache, and no step asks the system for fresh
    pages: a cheaper step, with the same results bit for bit
    (benchmarks/RESULTS.md#train-profile).

    It answers as a ``torch.optim.Optimizer`` does where training uses one (``param_groups``,
    ``state``, ``step``, ``zero_grad``, ``state_dict`` and ``load_state_dict``, in the same
    format) without deriving from it: the base class imports ``torch._dynamo`` on first use,
    a large part of every training process's start that training without ``torch.compile`` never
    needs (benchmarks/RESULTS.md#train-start).
    """

    #: rows gathered and updated at once (2 MiB of float32 moments at dim 1024)
    PIECE_ROWS = 512

    def __init__(self, params, lr: float = 1e-3, betas=(0.9, 0.999), eps: float = 1e-8):
        if lr <= 0 or eps <= 0 or not all(0 <= b < 1 for b in betas):
            raise ValueError(f"invalid LazyAdam settings lr={lr} betas={betas} eps={eps}")
        params = list(params)
        if not params or not all(isinstance(p, torch.Tensor) for p in params):
            raise ValueError("LazyAdam takes a non-empty list of tensors")
        self.defaults = dict(lr=lr, betas=tuple(betas), eps=eps)
        self.param_groups: list[dict] = [{**self.defaults, "params": params}]
        self.state: defaultdict[torch.Tensor, dict] = defaultdict(dict)
        self._pieces: dict[tuple, tuple[torch.Tensor, torch.Tensor]] = {}

    def _params(self) -> list[torch.Tensor]:
        return [param for group in self.param_groups for param in group["params"]]

    def zero_grad(self, set_to_none: bool = True) -> None:
        for param in self._params():
            if param.grad is None:
                continue
            if set_to_none:
                param.grad = None
            else:
                param.grad = param.grad.detach()
                param.grad.zero_()

    def state_dict(self) -> dict:
        """``torch.optim.Optimizer.state_dict``'s format: the state by parameter number, the
        groups with their parameters' numbers."""
        numbers = {id(param): number for number, param in enumerate(self._params())}
        groups, start = [], 0
        for group in self.param_groups:
            count = len(group["params"])
            groups.append({**group, "params": list(range(start, start + count))})
            start += count
        state = {numbers[id(param)]: values for param, values in self.state.items()}
        return {"state": state, "param_groups": groups}

    def load_state_dict(self, state_dict: dict) -> None:
        """Take a :meth:`state_dict` back: ValueError where it does not fit these parameters
        (other groups, numbers or shapes); the moments are moved to each parameter's device and
        dtype."""
        groups = state_dict["param_groups"]
        if [len(g["params"]) for g in groups] != [len(g["params"]) for g in self.param_groups]:
            raise ValueError("the saved parameter groups differ from the optimizer's")
        params = dict(zip((n for g in groups for n in g["params"]), self._params(), strict=True))
        state: defaultdict[torch.Tensor, dict] = defaultdict(dict)
        for number, values in state_dict["state"].items():
            param = params.get(int(number))
            if param is None:
                raise ValueError(f"state for a parameter number {number} the optimizer lacks")
            for key, value in values.items():
                if isinstance(value, torch.Tensor):
                    if value.shape != param.shape:
                        raise ValueError(f"{key} is {tuple(value.shape)}, its parameter "
                                         f"{tuple(param.shape)}")  # fmt: skip
                    value = value.to(device=param.device, dtype=param.dtype)
                state[param][key] = value
        for group, saved in zip(self.param_groups, groups, strict=True):
            group.update({k: v for k, v in saved.items() if k != "params"})
        self.state = state

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


#: what :func:`build_optimizer` returns
TrainingOptimizer = torch.optim.Optimizer | LazyAdam


def build_optimizer(model: nn.Module, kind: str, lr: float) -> TrainingOptimizer:
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
