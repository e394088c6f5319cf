"""Progress lines for the long streaming stages: pairs done of the total, rate and time left,
logged at least every ``seconds`` (and not more often), so that a stage of minutes is never
silent in the run's log (the assets forward the ``ops`` loggers to it)."""

from __future__ import annotations

import logging
import math
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from psp_core.durations import format_duration

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


@contextmanager
def heartbeat(
    describe: Callable[[], str],
    *,
    seconds: float | None = None,
    emit: Callable[[str], None] | None = None,
) -> Iterator[None]:
    """While the block runs a call that reports nothing of its own (a library's training loop),
    log ``describe()`` and the time spent every ``seconds``, from a thread of its own (the call
    must release the GIL, as sentencepiece's trainer does)."""
    # (never a busy loop, whatever the setting)
    every = max(DEFAULT_SECONDS if seconds is None else seconds, 0.01)
    emit = emit or log.info
    started = time.perf_counter()
    done = threading.Event()

    def beat() -> None:
        while not done.wait(every):
            emit(f"{describe()}: {format_duration(time.perf_counter() - started)} so far")

    thread = threading.Thread(target=beat, name="heartbeat", daemon=True)
    thread.start()
    try:
        yield
    finally:
        done.set()
        thread.join()
