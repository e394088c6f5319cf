"""Training under faults: a checkpoint written for another training file, a full disk."""

from __future__ import annotations

import json
import resource
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from psp_core import TrainConfig, load_model, train
from psp_core.cli import main
from psp_core.training.checkpoint import CheckpointMismatchError, CheckpointStore
from tests.conftest import write_training_file
from tests.psp_core.filesystems import tiny_tmpfs

QUICK = dict(dim=32, batch_size=32, max_megabatch=4, anneal_every=5, log_every=0, lr=0.05)
QUICK_FLAGS = [f"--{name.replace('_', '-')}={value}" for name, value in QUICK.items()]


@pytest.fixture()
def reordered_training_file(tmp_path, toy, tokenizer) -> Path:
    """The pairs of ``toy_training_file`` in reverse order: same count, same tokenizer."""
    return write_training_file(tmp_path / "reordered.h5", tokenizer, toy.pairs(2000)[::-1])


def train_argv(data: Path, spm_path: Path, output: Path, *extra: str) -> list[str]:
    argv = ["train", f"--data={data}", f"--spm={spm_path}", f"--output={output}"]
    return argv + QUICK_FLAGS + list(extra)


# --- a checkpoint of other data ------------------------------------------------------------------


def test_a_checkpoint_of_other_pairs_is_refused(
    tmp_path, toy_training_file, reordered_training_file, spm_path
):
    train(toy_training_file, spm_path, tmp_path / "m", TrainConfig(**QUICK, max_steps=3))
    store = CheckpointStore(tmp_path / "m.checkpoint")
    latest = store.latest
    with pytest.raises(CheckpointMismatchError) as caught:
        train(reordered_training_file, spm_path, tmp_path / "m", TrainConfig(**QUICK, epochs=1))
    message = str(caught.value)
    assert "another training file" in message and str(store.directory) in message
    assert "\n" not in message
    assert store.latest == latest  # left as it was


def test_the_same_pairs_written_again_resume(tmp_path, toy, tokenizer, toy_training_file, spm_path):
    """The fingerprint is of the content: a file rewritten with the same pairs is the same."""
    rewritten = write_training_file(tmp_path / "rewritten.h5", tokenizer, toy.pairs(2000))
    config = TrainConfig(**QUICK, epochs=1)
    reference = train(toy_training_file, spm_path, tmp_path / "ref", config)
    train(toy_training_file, spm_path, tmp_path / "m", TrainConfig(**QUICK, epochs=1, max_steps=3))
    resumed = train(rewritten, spm_path, tmp_path / "m", config)
    assert load_model(resumed.bundle).weight.equal(load_model(reference.bundle).weight)


def test_a_checkpoint_that_does_not_record_its_data_is_refused(
    tmp_path, toy_training_file, spm_path
):
    """Checkpoints written before the data fingerprint existed cannot show they match."""
    train(toy_training_file, spm_path, tmp_path / "m", TrainConfig(**QUICK, max_steps=3))
    state_file = CheckpointStore(tmp_path / "m.checkpoint").latest / "state.json"
    payload = json.loads(state_file.read_text())
    del payload["fingerprint"]["data_sha256"]
    state_file.write_text(json.dumps(payload))
    with pytest.raises(CheckpointMismatchError, match="does not record"):
        train(toy_training_file, spm_path, tmp_path / "m", TrainConfig(**QUICK, epochs=1))


def test_psp_train_on_other_pairs_stops_with_one_line(
    tmp_path, toy_training_file, reordered_training_file, spm_path, capsys
):
    output = tmp_path / "m"
    assert main(train_argv(toy_training_file, spm_path, output) + ["--max-steps=3"]) == 0
    capsys.readouterr()

    assert main(train_argv(reordered_training_file, spm_path, output) + ["--epochs=1"]) == 2

    err = capsys.readouterr().err
    [line] = err.splitlines()
    assert line.startswith("psp: error: ") and "--no-resume" in line
    assert str(tmp_path / "m.checkpoint") in line
    argv = train_argv(reordered_training_file, spm_path, output) + ["--epochs=1", "--no-resume"]
    assert main(argv) == 0
    assert json.loads(capsys.readouterr().out)["history"][0]["epoch"] == 0


# --- a full disk ---------------------------------------------------------------------------------


def test_psp_train_on_a_full_disk_stops_with_one_line_and_no_temporary_files(
    tmp_path, toy_training_file, spm_path, capsys
):
    # the weights of a checkpoint (400 x 32 float32, 51 KiB) fit, its optimizer moments do not
    with tiny_tmpfs(tmp_path / "small", size_kib=96) as small:
        checkpoints = small / "checkpoints"
        argv = train_argv(toy_training_file, spm_path, tmp_path / "m")
        argv += [f"--checkpoint-dir={checkpoints}", "--checkpoint-every=5"]

        assert main(argv) == 2

        [line] = capsys.readouterr().err.splitlines()
        assert line.startswith("psp: error: ")
        assert "no space left on device" in line.lower() and str(checkpoints) in line
        assert sorted(p.name for p in checkpoints.iterdir()) == []
        assert not (tmp_path / "m").exists()


def _limit_file_size() -> None:
    limit = 64 << 10
    resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit fails with EFBIG


@pytest.mark.slow
def test_psp_train_past_the_file_size_limit_stops_with_one_line(
    tmp_path, toy_training_file, spm_path
):
    argv = train_argv(toy_training_file, spm_path, tmp_path / "m") + ["--checkpoint-every=5"]
    completed = subprocess.run(
        [sys.executable, "-m", "psp_core.cli", *argv],
        capture_output=True,
        text=True,
        preexec_fn=_limit_file_size,
    )
    assert completed.returncode == 2, completed.stderr
    errors = [line for line in completed.stderr.splitlines() if "psp: error" in line]
    assert errors == [completed.stderr.splitlines()[-1]]
    assert "file too large" in errors[0].lower() and str(tmp_path / "m.checkpoint") in errors[0]
    assert "Traceback" not in completed.stderr
    assert [p.name for p in (tmp_path / "m.checkpoint").iterdir()] == []
