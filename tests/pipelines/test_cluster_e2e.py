"""``scripts/cluster_e2e.py`` stops everything it started: after a failure (a backfill
of a partition that does not exist) and after Ctrl-C in the middle of a backfill, no process of
its services is left, its PostgreSQL server is stopped, and the last line is the JSON summary
saying what happened. The successful path is CI's (``.ci/run`` runs the script whole, ~80 s).
Skipped, with a message, without Redis, PostgreSQL or the ``cluster`` extra."""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.child_signals import default_sigint

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "scripts"))
import postgres  # noqa: E402  (scripts/postgres.py)


def _postgres_installed() -> bool:
    try:
        postgres.bin_dir()
    except postgres.PostgresError:
        return False
    return True


pytestmark = [
    pytest.mark.skipif(shutil.which("redis-server") is None, reason="no redis-server (apt-get)"),
    pytest.mark.skipif(
        not _postgres_installed(), reason="no PostgreSQL (apt-get install postgresql)"
    ),
    pytest.mark.skipif(
        importlib.util.find_spec("dagster_celery") is None
        or importlib.util.find_spec("dagster_postgres") is None,
        reason="the cluster extra is not installed (pip install -e '.[cluster]')",
    ),
]

STARTED = re.compile(r"^started (\S+) \(pid (\d+)\)")


def _run(arguments: list[str], work: Path, interrupt_after: str | None = None):
    """Run the script; with ``interrupt_after``, send SIGINT once a line contains it. Returns
    (exit status, stdout lines, {service: pid})."""
    command = [sys.executable, str(ROOT / "scripts" / "cluster_e2e.py"), "--keep", str(work)]
    process = subprocess.Popen(
        command + arguments,
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        preexec_fn=default_sigint,
    )
    lines, pids = [], {}
    deadline = time.monotonic() + 300
    for line in process.stdout:
        lines.append(line.rstrip("\n"))
        if match := STARTED.match(line):
            pids[match.group(1)] = int(match.group(2))
        if interrupt_after and interrupt_after in line:
            process.send_signal(signal.SIGINT)
            interrupt_after = None
        assert time.monotonic() < deadline, "\n".join(lines[-30:])
    return process.wait(60), lines, pids


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    state = Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0]
    return state != "Z"


@pytest.mark.parametrize("how", ["failure", "ctrl-c"])
def test_everything_it_started_is_stopped(tmp_path, how) -> None:
    work = Path(f"/tmp/psp-cluster-test-{os.getpid()}-{how}")  # reachable by the postgres user
    try:
        if how == "failure":
            status, lines, pids = _run(["--languages", "xx", "--no-faults"], work)
        else:
            status, lines, pids = _run(["--no-faults"], work, interrupt_after="backfill ")
        summary = json.loads(lines[-1])
        assert status == 1 and summary["ok"] is False, "\n".join(lines[-40:])
        if how == "failure":
            assert "xx" in summary["error"]
        else:
            assert summary["error"].startswith("interrupted")
        assert {"redis", "code-server", "worker-1", "worker-2", "daemon"} <= set(pids)
        assert summary["left_running"] == []
        assert [name for name, pid in pids.items() if _alive(pid)] == []
        assert not postgres.status(work / "pgdata")
    finally:
        shutil.rmtree(work, ignore_errors=True)
