"""Training progress lines: due by step count or by wall time (a run of hours is never silent
for longer than ``log_seconds``), with epoch, step, mega-batch, loss, pairs/s and ETA."""

from __future__ import annotations

import logging
import re

from psp_core import TrainConfig, train
from psp_core.training.progress import TrainingProgress, format_duration


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def progress(clock: Clock, lines: list[str], **overrides) -> TrainingProgress:
    settings = dict(
        epoch=1,
        epochs=4,
        first_step=100,
        epoch_steps=100,
        total_steps=400,
        pairs_per_step=128,
        megabatch_at=lambda step: 1 + step // 150,
        every=0,
        seconds=30.0,
        clock=clock,
        emit=lines.append,
    )
    return TrainingProgress(**(settings | overrides))


def test_a_line_is_due_every_30_seconds_whatever_the_step_count() -> None:
    clock, lines = Clock(), []
    report = progress(clock, lines)
    for step in range(101, 131):  # 30 steps of 2 s each: 60 s
        clock.now += 2.0
        report(step, loss=0.5)
    assert len(lines) == 2  # at 30 s and at 60 s
    assert lines[0].startswith("epoch 2/4 step 115/400 megabatch 1 loss 0.5000 pairs/s 64 ")
    # 0.5 steps/s: 85 steps left in this epoch (170 s), 285 in the run (570 s)
    assert lines[0].endswith("eta epoch 2m50s run 9m30s")


def test_a_line_is_due_every_n_steps_too_and_shows_the_recent_loss() -> None:
    clock, lines = Clock(), []
    report = progress(clock, lines, every=10, seconds=0.0)
    for step in range(101, 121):
        clock.now += 0.1
        report(step, loss=float(step > 110))
    assert [re.search(r"step (\d+)/", line).group(1) for line in lines] == ["110", "120"]
    assert "loss 0.0000" in lines[0] and "loss 1.0000" in lines[1]


def test_a_line_right_after_another_has_no_loss_rather_than_nan() -> None:
    """The end of an epoch just after a line: no step since, so no recent loss to show (the
    epoch's mean loss has its own line), never ``loss nan``."""
    clock, lines = Clock(), []
    report = progress(clock, lines, every=10, seconds=0.0)
    for step in range(101, 111):
        clock.now += 0.1
        report(step, loss=0.25)
    end = report.line(110)
    assert "nan" not in end and "loss" not in end
    assert end.startswith("epoch 2/4 step 110/400 megabatch 1 pairs/s ")
    assert "loss 0.2500" in lines[-1]


def test_durations_read_as_durations() -> None:
    assert [format_duration(s) for s in (0, 12.4, 245, 3720, float("inf"))] == [
        "0s",
        "12s",
        "4m05s",
        "1h02m",
        "?",
    ]


def test_a_real_training_run_logs_progress_by_time_and_at_each_epoch_end(
    toy_training_file, spm_path, tmp_path, caplog
) -> None:
    config = TrainConfig(
        dim=16,
        batch_size=64,
        max_megabatch=2,
        anneal_every=0,
        epochs=2,
        log_every=0,
        log_seconds=1e-9,  # every step is due by time
        checkpoint_every=0,
    )
    with caplog.at_level(logging.INFO, logger="psp_core"):
        train(toy_training_file, spm_path, tmp_path / "model", config)
    lines = [r.getMessage() for r in caplog.records if r.name == "psp_core.training.progress"]
    pattern = (
        r"epoch [12]/2 step \d+/64 megabatch 2 loss \d\.\d{4} pairs/s \d+ eta epoch \S+ run \S+"
    )
    assert len(lines) == 64 and all(re.fullmatch(pattern, line) for line in lines), lines
    ends = [r.getMessage() for r in caplog.records if r.getMessage().startswith("end of epoch")]
    assert len(ends) == 2 and ends[-1].endswith("run 0s"), ends


def test_the_epoch_line_is_words_not_a_dict() -> None:
    from psp_core.training.trainer import epoch_summary

    record = {
        "epoch": 2,
        "steps": 1865,
        "loss": 0.512345678,
        "pairs_per_second": 2631.4,
        "seconds": 36.24,
        "dev_score": 82.4123,
    }
    assert epoch_summary(record) == (
        "epoch 3 done at step 1,865, mean loss 0.5123, 2,631 pairs/s, 36.2 s, dev score 82.41"
    )
    assert epoch_summary({"epoch": 0, "steps": 14, "loss": None}) == "epoch 1 done at step 14"
