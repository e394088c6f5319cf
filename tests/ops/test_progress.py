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


def test_a_silent_call_gets_a_heartbeat_while_it_runs_and_none_after() -> None:
    """A call that reports nothing (sentencepiece's training) still shows it is alive; the
    beats stop when it returns, and the call's errors pass through."""
    import threading
    import time

    import pytest

    from ops.progress import heartbeat

    lines: list[str] = []
    released = threading.Event()
    with heartbeat(lambda: "sentencepiece: training", seconds=0.05, emit=lines.append):
        released.wait(0.3)  # a call that releases the GIL, as the trainer does
    count = len(lines)
    assert count >= 3 and all(line.startswith("sentencepiece: training: ") for line in lines)
    assert all(line.endswith(" so far") for line in lines)
    time.sleep(0.2)
    assert len(lines) == count  # no beat after the block
    with pytest.raises(RuntimeError, match="vocab"), heartbeat(lambda: "x", seconds=0.05):
        raise RuntimeError("vocab too small")


def test_the_sentencepiece_stage_reports_its_sample_and_its_training(
    tmp_path, toy, caplog, monkeypatch
) -> None:
    """Reading the sample and training are both long on a large corpus: each logs progress."""
    import logging

    import ops.progress
    from ops.pairs.pair_files import PairWriter
    from ops.training_data.sentencepiece_model import train_sentencepiece_from_pairs

    pairs = tmp_path / "pairs.parquet"
    sources, targets = zip(*toy.pairs(2000), strict=True)
    with PairWriter(pairs, src_lang="en", tgt_lang="xx") as writer:
        writer.write(list(sources), list(targets))
    caplog.set_level(logging.INFO)
    monkeypatch.setattr(ops.progress, "DEFAULT_SECONDS", 0.0)  # every update is due
    train_sentencepiece_from_pairs(pairs, tmp_path / "spm.model", vocab_size=300)
    messages = [r.getMessage() for r in caplog.records]
    assert any(m.startswith("sentencepiece sample: ") and "sentences" in m for m in messages)
    assert any(m.startswith("training sentencepiece (vocab 300)") for m in messages)
