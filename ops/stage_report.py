"""Counts every corpus stage reports: pairs in, pairs out, why each dropped pair was dropped, and
notes on pairs kept with a caveat (a ParaNMT pair without a score)."""

from __future__ import annotations

import time
from collections import Counter
from dataclasses import dataclass, field


@dataclass
class StageReport:
    """What one stage did. ``n_in == n_out + sum(dropped.values())`` once the stage is done.

    ``notes`` counts pairs that were kept but differ from the rest in a way a reader of the
    stage's record should know (``unscored``: read without a score); they are part of
    ``n_out``, not drops.
    """

    stage: str
    n_in: int = 0
    n_out: int = 0
    dropped: Counter[str] = field(default_factory=Counter)
    notes: Counter[str] = field(default_factory=Counter)
    seconds: float = 0.0
    _started: float = field(default_factory=time.perf_counter, repr=False)

    def drop(self, reason: str, count: int = 1) -> None:
        if count:
            self.dropped[reason] += count

    def note(self, remark: str, count: int = 1) -> None:
        if count:
            self.notes[remark] += count

    def finish(self) -> StageReport:
        """Stop the clock and check that every input pair is accounted for."""
        self.seconds = time.perf_counter() - self._started
        accounted = self.n_out + sum(self.dropped.values())
        if accounted != self.n_in:
            raise AssertionError(
                f"stage {self.stage!r}: {self.n_in} pairs in but {self.n_out} out and "
                f"{sum(self.dropped.values())} dropped ({dict(self.dropped)})"
            )
        return self

    def as_dict(self) -> dict:
        """The counts as JSON-able data; ``notes`` only when there are any."""
        result = {
            "stage": self.stage,
            "n_in": self.n_in,
            "n_out": self.n_out,
            "dropped": dict(sorted(self.dropped.items())),
            "seconds": round(self.seconds, 3),
        }
        if self.notes:
            result["notes"] = dict(sorted(self.notes.items()))
        return result
