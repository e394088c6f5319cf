"""Two trainings onto one output: the second stops at once with one line (exit 2) and touches
nothing, while the first holds the lock; a first run killed with ``kill -9`` leaves no stale
lock, and the next run takes it and resumes."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from psp_core.files.file_lock import LockHeld, exclusive_lock
from psp_core.training.trainer import training_lock, training_locks

PSP_SCRIPT = Path(sys.executable).with_name("psp")
QUICK_FLAGS = ["--dim=32", "--batch-size=32", "--max-megabatch=4", "--anneal-every=5",
               "--log-every=0", "--lr=0.05", "--checkpoint-every=2"]  # fmt: skip


def test_a_held_lock_refuses_at_once_and_is_free_after(tmp_path):
    lock = tmp_path / ".out.lock"
    with exclusive_lock(lock, wait=False):
        with pytest.raises(LockHeld), exclusive_lock(lock, wait=False):
            pass
    with exclusive_lock(lock, wait=False):
        assert lock.exists()
    assert not lock.exists()  # removed when released


def test_a_link_and_its_target_share_the_lock(tmp_path):
    (tmp_path / "models").mkdir()
    (tmp_path / "latest").symlink_to(tmp_path / "models")
    assert training_lock(tmp_path / "latest") == tmp_path / ".models.lock"
    with training_locks(tmp_path / "models", tmp_path / "cp"):
        with pytest.raises(Exception, match="being written by another training run"):
            with training_locks(tmp_path / "latest", tmp_path / "other-cp"):
                pass


def test_two_outputs_sharing_a_checkpoint_folder_are_refused(tmp_path):
    with training_locks(tmp_path / "a", tmp_path / "cp"):
        with pytest.raises(Exception, match=r"checkpoint directory .*cp is being written"):
            with training_locks(tmp_path / "b", tmp_path / "cp"):
                pass
        assert not (tmp_path / ".b.lock").exists()  # the lock it took first, released
    with training_locks(tmp_path / "b", tmp_path / "cp"):  # free once the first ends
        pass


def snapshot(*folders: Path) -> dict[Path, tuple[int, int, int]]:
    return {
        path: (path.stat().st_ino, path.stat().st_size, path.stat().st_mtime_ns)
        for folder in folders
        for path in folder.rglob("*")
    }


def wait_for(condition, seconds: float, what: str) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        if time.monotonic() > deadline:
            pytest.fail(f"timed out waiting for {what}")
        time.sleep(0.05)


def stopped(pid: int) -> bool:
    """Whether ``pid`` is stopped (SIGSTOP is delivered asynchronously: until then, the process
    can still write)."""
    with open(f"/proc/{pid}/stat", encoding="ascii") as handle:
        return handle.read().rpartition(")")[2].split()[0] == "T"


@pytest.mark.slow
def test_a_second_train_onto_a_busy_output_stops_and_a_killed_first_leaves_no_lock(
    tmp_path, toy_training_file, spm_path
):
    output = tmp_path / "m"
    checkpoint = tmp_path / "m.checkpoint"
    argv = [str(PSP_SCRIPT), "train", f"--data={toy_training_file}", f"--spm={spm_path}",
            f"--output={output}", *QUICK_FLAGS]  # fmt: skip
    first = subprocess.Popen([*argv, "--epochs=500"], stderr=subprocess.DEVNULL)
    try:
        wait_for(lambda: (checkpoint / "LATEST").exists(), 120, "the first run's checkpoint")
        os.kill(first.pid, signal.SIGSTOP)  # mid-run: it holds the lock and is not writing
        wait_for(lambda: stopped(first.pid), 30, "the first run to stop")
        before = snapshot(tmp_path)

        second = subprocess.run([*argv, "--epochs=1"], capture_output=True, text=True)

        assert second.returncode == 2, second.stderr
        lines = second.stderr.strip().splitlines()
        assert len(lines) == 1 and "being written by another training run" in lines[0], lines
        assert str(output) in lines[0]
        assert snapshot(tmp_path) == before  # nothing touched
    finally:
        first.kill()  # SIGKILL, while stopped: no handler runs, no clean-up
        first.wait()
    assert (tmp_path / ".m.lock").exists()  # the file is left; the kernel dropped its lock

    resumed = subprocess.run([*argv, "--epochs=1"], capture_output=True, text=True)

    assert resumed.returncode == 0, resumed.stderr
    assert "resuming from" in resumed.stderr
    assert (output / "config.json").is_file()
    assert not (tmp_path / ".m.lock").exists() and not (tmp_path / ".m.checkpoint.lock").exists()
