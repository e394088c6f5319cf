"""Checkpoints found damaged: a truncated weights file, a byte changed in a file that still
loads (its checksum tells), a corrupt ``state.json``, a ``LATEST`` naming a missing step, a
changed ``best.safetensors``. Training names the file, resumes from the newest step that reads
back (with a warning), and, where none does, stops with one line giving the command that starts
afresh; it never restarts at step 0 on its own while a step is there. A damaged best epoch is
named, and the final weights written instead. Checkpoint files follow the umask."""

from __future__ import annotations

import json
import os
import shutil
import stat
from pathlib import Path

import pytest
import torch

from psp_core import TrainConfig, load_model, train
from psp_core.cli import main
from psp_core.training.checkpoint import (
    OPTIMIZER_FILE,
    POINTER_FILE,
    STATE_FILE,
    WEIGHTS_FILE,
    CheckpointDamagedError,
    CheckpointStore,
    TrainingState,
)

QUICK = dict(dim=32, batch_size=32, max_megabatch=4, anneal_every=5, log_every=0, lr=0.05)
#: two checkpoints on disk when the run stops: steps 4 (every 2 steps) and 5 (max_steps)
STOPPED = dict(QUICK, epochs=1, checkpoint_every=2, max_steps=5)


@pytest.fixture()
def stopped_run(tmp_path, toy_training_file, spm_path) -> CheckpointStore:
    """A run stopped at step 5, its checkpoints of steps 4 and 5 kept."""
    train(toy_training_file, spm_path, tmp_path / "m", TrainConfig(**STOPPED))
    store = CheckpointStore(tmp_path / "m.checkpoint")
    assert [p.name for p in store.steps()] == [
        "step-000000000005-epoch-0000",
        "step-000000000004-epoch-0000",
    ]
    return store


@pytest.fixture()
def reference(tmp_path, toy_training_file, spm_path) -> torch.Tensor:
    """The final weights of the same run never stopped."""
    done = train(toy_training_file, spm_path, tmp_path / "ref", TrainConfig(**QUICK, epochs=1))
    return load_model(done.bundle).weight


def resume(tmp_path, toy_training_file, spm_path, first_steps: list[int]):
    def on_step(step, loss):
        first_steps.append(step)

    config = TrainConfig(**QUICK, epochs=1)
    return train(toy_training_file, spm_path, tmp_path / "m", config, on_step=on_step)


def snapshot(folder: Path) -> dict[Path, tuple[int, int]]:
    return {p: (p.stat().st_ino, p.stat().st_mtime_ns) for p in folder.rglob("*")}


def truncate(path: Path) -> None:
    with open(path, "r+b") as handle:
        handle.truncate(path.stat().st_size // 2)


def test_truncated_weights_fall_back_to_the_step_before(
    tmp_path, toy_training_file, spm_path, stopped_run, reference, caplog
):
    newest = stopped_run.steps()[0]
    truncate(newest / WEIGHTS_FILE)
    steps: list[int] = []
    with caplog.at_level("WARNING"):
        done = resume(tmp_path, toy_training_file, spm_path, steps)
    assert steps[0] == 5  # resumed from step 4: the first step trained is the fifth
    warnings = " ".join(r.getMessage() for r in caplog.records if r.levelname == "WARNING")
    assert str(newest / WEIGHTS_FILE) in warnings and "step before" in warnings
    assert torch.equal(load_model(done.bundle).weight, reference)  # an exact resume


def test_a_corrupt_state_file_is_named_and_the_step_before_used(
    tmp_path, toy_training_file, spm_path, stopped_run, reference, caplog
):
    newest = stopped_run.steps()[0]
    (newest / STATE_FILE).write_text('{"state": {"step": 5, ')
    steps: list[int] = []
    with caplog.at_level("WARNING"):
        done = resume(tmp_path, toy_training_file, spm_path, steps)
    assert steps[0] == 5
    assert any(str(newest / STATE_FILE) in r.getMessage() for r in caplog.records)
    assert torch.equal(load_model(done.bundle).weight, reference)


def test_latest_naming_a_missing_step_resumes_from_the_newest_there(
    tmp_path, toy_training_file, spm_path, stopped_run, reference, caplog
):
    """Not step 0: ``LATEST`` names step 5, which is gone; step 4 is there."""
    shutil.rmtree(stopped_run.steps()[0])
    steps: list[int] = []
    with caplog.at_level("WARNING"):
        done = resume(tmp_path, toy_training_file, spm_path, steps)
    assert steps[0] == 5
    assert any("which is missing" in r.getMessage() for r in caplog.records)
    assert torch.equal(load_model(done.bundle).weight, reference)


def test_a_save_after_a_fall_back_removes_the_damaged_step(
    tmp_path, toy_training_file, spm_path, stopped_run
):
    damaged = stopped_run.steps()[0]
    truncate(damaged / OPTIMIZER_FILE)
    config = TrainConfig(**dict(STOPPED, max_steps=8))
    train(toy_training_file, spm_path, tmp_path / "m", config)
    names = [p.name for p in stopped_run.steps()]
    assert len(names) == 2 and all(name > damaged.name for name in names), names
    assert not damaged.exists()


def test_no_step_reads_back_stops_with_the_command_that_starts_afresh(
    tmp_path, toy_training_file, spm_path, stopped_run, capsys
):
    for step in stopped_run.steps():
        truncate(step / WEIGHTS_FILE)
    before = snapshot(tmp_path)
    with pytest.raises(CheckpointDamagedError, match="--no-resume"):
        train(toy_training_file, spm_path, tmp_path / "m", TrainConfig(**QUICK, epochs=1))

    argv = ["train", f"--data={toy_training_file}", f"--spm={spm_path}",
            f"--output={tmp_path / 'm'}", "--dim=32", "--batch-size=32", "--max-megabatch=4",
            "--anneal-every=5", "--log-every=0", "--lr=0.05", "--epochs=1"]  # fmt: skip
    capsys.readouterr()
    assert main(argv) == 2
    error = capsys.readouterr().err.strip().splitlines()
    assert len(error) == 1, error
    assert WEIGHTS_FILE in error[0] and str(stopped_run.directory) in error[0]
    assert error[0].endswith("psp " + " ".join(argv) + " --no-resume")
    assert snapshot(tmp_path) == before  # the checkpoints and the earlier bundle untouched
    # the command it gives starts afresh and trains
    assert main([*argv, "--no-resume"]) == 0


def test_latest_naming_a_missing_step_and_no_step_stops(
    tmp_path, toy_training_file, spm_path, stopped_run
):
    for step in stopped_run.steps():
        shutil.rmtree(step)
    with pytest.raises(CheckpointDamagedError, match=f"{POINTER_FILE} names step-000000000005"):
        train(toy_training_file, spm_path, tmp_path / "m", TrainConfig(**QUICK, epochs=1))


@pytest.mark.parametrize("umask", [0o022, 0o077])
def test_checkpoint_files_follow_the_umask(tmp_path, toy_training_file, spm_path, umask):
    previous = os.umask(umask)
    try:
        train(
            toy_training_file,
            spm_path,
            tmp_path / "m",
            TrainConfig(**QUICK, epochs=1, max_steps=3),
        )
        store = CheckpointStore(tmp_path / "m.checkpoint")
        store.save_best(torch.zeros(3, 2), 0, 1.0)
    finally:
        os.umask(previous)
    step = store.steps()[0]
    files = [step / WEIGHTS_FILE, step / OPTIMIZER_FILE, step / STATE_FILE]
    files += [store.directory / POINTER_FILE, store.directory / "best.safetensors"]
    modes = {path.name: oct(stat.S_IMODE(path.stat().st_mode)) for path in files}
    assert modes == {path.name: oct(0o666 & ~umask) for path in files}
    assert stat.S_IMODE(step.stat().st_mode) == 0o777 & ~umask


def flip_a_byte(path: Path) -> None:
    """Change one byte near the end (tensor data, not the header): the file keeps its size and
    still loads, only its checksum tells."""
    with open(path, "r+b") as handle:
        handle.seek(path.stat().st_size - 3)
        byte = handle.read(1)
        handle.seek(-1, os.SEEK_CUR)
        handle.write(bytes([byte[0] ^ 0x55]))


@pytest.mark.parametrize("name", [WEIGHTS_FILE, OPTIMIZER_FILE])
def test_a_changed_byte_in_a_step_is_found_by_its_checksum(
    tmp_path, toy_training_file, spm_path, stopped_run, reference, caplog, name
):
    newest = stopped_run.steps()[0]
    flip_a_byte(newest / name)
    steps: list[int] = []
    with caplog.at_level("WARNING"):
        done = resume(tmp_path, toy_training_file, spm_path, steps)
    assert steps[0] == 5  # step 4's checkpoint, not the changed step 5's
    warnings = " ".join(r.getMessage() for r in caplog.records if r.levelname == "WARNING")
    assert str(newest / name) in warnings and "xxh3_128" in warnings, warnings
    assert torch.equal(load_model(done.bundle).weight, reference)


def test_a_step_of_an_earlier_release_without_checksums_still_resumes(
    tmp_path, toy_training_file, spm_path, stopped_run, reference, caplog
):
    newest = stopped_run.steps()[0]
    payload = json.loads((newest / STATE_FILE).read_text())
    del payload["files"], payload["best"]
    (newest / STATE_FILE).write_text(json.dumps(payload))
    steps: list[int] = []
    with caplog.at_level("WARNING"):
        done = resume(tmp_path, toy_training_file, spm_path, steps)
    assert steps[0] == 6  # from step 5 itself
    assert not [r for r in caplog.records if r.levelname == "WARNING"]
    assert torch.equal(load_model(done.bundle).weight, reference)


def test_a_damaged_best_epoch_is_named_and_the_final_weights_written(
    tmp_path, toy_training_file, spm_path, caplog
):
    """The best epoch's ``best.safetensors`` changed before the bundle is written (here by the
    last dev evaluation): a warning names it, the bundle gets the final epoch's weights, and
    its training summary says which epoch's weights it holds and why."""
    best = tmp_path / "m.checkpoint" / "best.safetensors"
    scores, seen = iter([5.0, 1.0]), []

    def evaluator(model):
        seen.append(model.weight.clone())
        if len(seen) == 2:
            flip_a_byte(best)
        return next(scores)

    with caplog.at_level("WARNING"):
        result = train(toy_training_file, spm_path, tmp_path / "m",
                       TrainConfig(**QUICK, epochs=2), dev_evaluator=evaluator)  # fmt: skip
    model = load_model(result.bundle)
    assert torch.equal(model.weight, seen[1])  # the final epoch's, not the best (first)
    training = model.config.training
    assert training["best_epoch"] == 0 and training["weights_epoch"] == 1
    assert str(best) in training["best_epoch_unavailable"]
    warnings = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert any(str(best) in w and "final epoch's weights" in w for w in warnings), warnings


def test_the_best_epochs_record_survives_a_resume(tmp_path):
    """A store restored from a step knows the size and checksum ``best.safetensors`` had when
    that step was saved, and refuses the file once it changed."""
    store = CheckpointStore(tmp_path / "c")
    weight = torch.nn.Parameter(torch.randn(6, 4))
    optimizer = torch.optim.Adam([weight])
    store.save_best(weight, 0, 1.0)
    fingerprint = {**TrainConfig.ADDED_LATER, "data": "x"}
    state = TrainingState(step=1, best_epoch=0, best_score=1.0)
    store.save(weight, optimizer, state, fingerprint)
    resumed = CheckpointStore(tmp_path / "c")
    resumed.restore(weight, optimizer, fingerprint)
    assert resumed.best_record == store.best_record is not None
    assert torch.equal(resumed.load_best(weight.shape), weight.detach())
    flip_a_byte(store.directory / "best.safetensors")
    with pytest.raises(CheckpointDamagedError, match="best.safetensors: .* when it was written"):
        resumed.load_best(weight.shape)
    (store.directory / "best.safetensors").unlink()
    with pytest.raises(CheckpointDamagedError, match="best.safetensors is missing"):
        resumed.load_best(weight.shape)
