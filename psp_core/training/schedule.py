"""Schedules over the steps of a run: mega-batch annealing (the mega-batch starts at 1 mini-batch
and grows by one every ``anneal_every`` mini-batches up to ``max_size``; the paper: every 150,
up to 100) and the learning rate's decay."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class MegabatchSchedule:
    max_size: int
    anneal_every: int = 150

    def size_at(self, step: int) -> int:
        """Mega-batch size (in mini-batches) for a mega-batch starting after ``step`` steps."""
        if self.anneal_every <= 0:
            return self.max_size
        return min(self.max_size, 1 + step // self.anneal_every)


def learning_rate_at(step: int, total_steps: int, lr: float, decay: str) -> float:
    """The learning rate of the mini-batch that follows ``step`` steps of ``total_steps``:
    ``lr`` throughout for ``"constant"``; for ``"linear"``, ``lr`` at the first step falling by
    ``lr / total_steps`` a step (the last step trains at ``lr / total_steps``)."""
    if decay == "constant":
        return lr
    if decay == "linear":
        return lr * max(total_steps - step, 1) / max(total_steps, 1)
    raise ValueError(f"unknown learning-rate decay {decay!r}")
