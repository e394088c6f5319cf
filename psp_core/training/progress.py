"""Training progress lines: every ``every`` steps and at least every ``seconds`` of wall time,
with the epoch, the step, the mega-batch size, the recent loss, pairs/s and the time left.

Through ``logging`` (logger ``psp_core.training.progress``): the Dagster asset forwards it to
the run's event log, the CLI prints it. A run of hours must never be silent for longer than
``seconds``.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable

from psp_core.durations import format_duration

log = logging.getLogger(__name__)


class TrainingProgress:
    """Called after every optimizer step of one epoch; logs a line when due.

    Args:
        epoch: this epoch (0-based) and ``epochs`` the run's number of epochs.
        first_step: the global step this epoch (or its resumed part) starts after.
        epoch_steps: steps in a whole epoch; ``total_steps`` in the whole run.
        pairs_per_step: pairs trained per step (batch size x ranks).
        megabatch_at: the mega-batch size (in mini-batches) at a step.
        every: log every this many steps (0: only by time); ``seconds``: at least this often.
    """

    def __init__(
        self,
        *,
        epoch: int,
        epochs: int,
        first_step: int,
        epoch_steps: int,
        total_steps: int,
        pairs_per_step: int,
        megabatch_at: Callable[[int], int],
        every: int,
        seconds: float,
        clock: Callable[[], float] = time.perf_counter,
        emit: Callable[[str], None] | None = None,
    ) -> None:
        self.epoch, self.epochs = epoch, epochs
        self.first_step = first_step
        self.epoch_end = min(total_steps, (epoch + 1) * epoch_steps)
        self.total_steps = total_steps
        self.pairs_per_step = pairs_per_step
        self.megabatch_at = megabatch_at
        self.every, self.seconds = every, seconds
        self.clock = clock
        self.emit = emit or log.info
        self.started = clock()
        self.last_logged = self.started
        self.losses: list[float] = []
        self.n_steps = 0

    def __call__(self, step: int, loss: float) -> None:
        self.losses.append(loss)
        self.n_steps += 1
        now = self.clock()
        due_by_count = self.every and step % self.every == 0
        due_by_time = self.seconds and now - self.last_logged >= self.seconds
        if due_by_count or due_by_time:
            self.emit(self.line(step, now))
            self.last_logged = now
            self.losses.clear()

    def line(self, step: int, now: float | None = None) -> str:
        now = self.clock() if now is None else now
        elapsed = max(now - self.started, 1e-9)
        steps_per_second = self.n_steps / elapsed
        pairs_per_second = steps_per_second * self.pairs_per_step
        # the mean loss of the steps since the last line: none where a line was just written
        # (the end of an epoch right after one), which the epoch's own mean line then gives
        recent = f"loss {sum(self.losses) / len(self.losses):.4f} " if self.losses else ""
        eta_epoch = (self.epoch_end - step) / steps_per_second if self.n_steps else math.inf
        eta_run = (self.total_steps - step) / steps_per_second if self.n_steps else math.inf
        return (
            f"epoch {self.epoch + 1}/{self.epochs} step {step}/{self.total_steps} "
            f"megabatch {self.megabatch_at(step)} {recent}pairs/s {pairs_per_second:.0f} "
            f"eta epoch {format_duration(eta_epoch)} run {format_duration(eta_run)}"
        )
