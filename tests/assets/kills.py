"""Killing a materialization of psp_model at a chosen point, as an operator or the OOM killer
would: in a process of its own, SIGKILL once training has saved a checkpoint."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def kill_at_first_checkpoint(code: str, argv: list[str], model_dir: Path, seconds: float) -> None:
    """Run ``python -c code *argv`` from the repository root and SIGKILL it once a checkpoint
    of ``model_dir`` has a ``LATEST`` (within ``seconds``); fails if it ended first."""
    process = subprocess.Popen(
        [sys.executable, "-c", code, *argv],
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + seconds
    while process.poll() is None and time.monotonic() < deadline:
        if list(model_dir.glob("checkpoint-*/LATEST")):
            break
        time.sleep(0.01)
    process.send_signal(signal.SIGKILL)
    process.wait()
    assert process.returncode == -signal.SIGKILL, "training finished before it could be killed"
