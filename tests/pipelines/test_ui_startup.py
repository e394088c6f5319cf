"""`make ui` (the README's way to start the Dagster UI) starts without a warning and stops
within 10 s of Ctrl-C (SIGINT to its process group, as a terminal sends it), leaving no
Dagster process behind."""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import time
from pathlib import Path

import pytest
import requests

from tests.child_signals import default_sigint

ROOT = Path(__file__).resolve().parents[2]
STARTUP_SECONDS = 120
EXIT_SECONDS = 10

pytestmark = pytest.mark.slow


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_make_ui_starts_without_warnings_and_stops_on_ctrl_c(tmp_path: Path) -> None:
    port = free_port()
    log = tmp_path / "ui.log"
    env = os.environ | {
        "DAGSTER_HOME": str(tmp_path / "home"),
        "PSP_STORAGE_ROOT": str(tmp_path / "storage"),
        "NO_PROXY": "127.0.0.1,localhost",
    }
    env.pop("PYTHONWARNINGS", None)
    with open(log, "wb") as output:
        process = subprocess.Popen(
            [
                "make",
                "--no-print-directory",
                "ui",
                f"UI_PORT={port}",
                f"DAGSTER_HOME={tmp_path / 'home'}",
            ],
            cwd=ROOT,
            env=env,
            stdout=output,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            preexec_fn=default_sigint,  # (make must hear the Ctrl-C below)
        )
    try:
        deadline = time.monotonic() + STARTUP_SECONDS
        while True:
            assert process.poll() is None, log.read_text()
            try:
                if requests.get(f"http://127.0.0.1:{port}/server_info", timeout=2).ok:
                    break
            except requests.RequestException:
                pass
            assert time.monotonic() < deadline, "the UI did not start:\n" + log.read_text()
            time.sleep(1)
        # the daemon and the code server log after the webserver answers: give them a moment
        time.sleep(5)
        started = time.monotonic()
        os.killpg(process.pid, signal.SIGINT)
        process.wait(timeout=60)
        stopped_after = time.monotonic() - started
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
    text = log.read_text()
    warnings = [line for line in text.splitlines() if re.search(r"warn", line, re.IGNORECASE)]
    assert warnings == [], text
    assert (tmp_path / "home" / "dagster.yaml").is_file()  # the repository's instance settings
    assert stopped_after <= EXIT_SECONDS, f"stopped after {stopped_after:.1f} s:\n{text}"
    left = subprocess.run(
        ["pgrep", "-f", f"-p {port}"], capture_output=True, text=True, check=False
    ).stdout.split()
    assert left == [], f"processes left: {left}"
