"""Mega-batch annealing: the mega-batch starts at 1 mini-batch and grows by one every
``anneal_every`` mini-batches up to ``max_size`` (the paper: every 150, up to 100)."""

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
