"""Stage progress lines: due by time only, with the share done, the rate and the time left."""

from __future__ import annotations

from ops.progress import Progress


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_a_line_every_30_seconds_with_share_rate_and_eta() -> None:
    clock, lines = Clock(), []
    progress = Progress("langid", 1_000_000, clock=clock, emit=lines.append)
    for _ in range(100):  # 10,000 pairs per second, a batch every second
        clock.now += 1.0
        progress.update(10_000)
    assert len(lines) == 3  # at 30, 60 and 90 s
    assert lines[0] == "langid: 300,000 / 1,000,000 pairs (30%), 10,000 pairs/s, eta 1m10s"


def test_without_a_total_it_counts_and_gives_the_rate() -> None:
    clock, lines = Clock(), []
    progress = Progress("download", None, unit="bytes", seconds=5, clock=clock, emit=lines.append)
    clock.now = 5.0
    progress.update(5_000)
    assert lines == ["download: 5,000 bytes, 1,000 bytes/s"]
