"""Progress lines for the long streaming stages: pairs done of the total, rate and time left,
logged at least every ``seconds`` (and not more often), so that a stage of minutes is never
silent in the run's log (the assets forward the ``ops`` loggers to it)."""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable

from psp_core.training.progress import format_duration

log = logging.getLogger(__name__)

DEFAULT_SECONDS = 30.0


class Progress:
    """``update(n)`` after each batch of ``n`` pairs; a line is logged when ``seconds`` have
    passed since the last one."""

    def __init__(
        self,
        stage: str,
        total: int | None,
        *,
        unit: str = "pairs",
        seconds: float | None = None,
        clock: Callable[[], float] = time.perf_counter,
        emit: Callable[[str], None] | None = None,
    ) -> None:
        self.stage, self.total, self.unit = stage, total, unit
        self.seconds = DEFAULT_SECONDS if seconds is None else seconds
        self.clock = clock
        self.emit = emit or log.info
        self.started = self.last = clock()
        self.done = 0

    def update(self, n: int) -> None:
        self.done += n
        now = self.clock()
        if now - self.last >= self.seconds:
            self.emit(self.line(now))
            self.last = now

    def line(self, now: float | None = None) -> str:
        now = self.clock() if now is None else now
        rate = self.done / max(now - self.started, 1e-9)
        if self.total:
            share = 100.0 * self.done / self.total
            left = (self.total - self.done) / rate if rate > 0 else math.inf
            return (
                f"{self.stage}: {self.done:,} / {self.total:,} {self.unit} ({share:.0f}%), "
                f"{rate:,.0f} {self.unit}/s, eta {format_duration(left)}"
            )
        return f"{self.stage}: {self.done:,} {self.unit}, {rate:,.0f} {self.unit}/s"
