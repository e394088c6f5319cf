"""``psp serve --workers N`` as an operator meets it: a promoted model that cannot load stops the
server with its error (no restart loop), workers end when their supervisor is killed (``kill
-9`` included), SIGTERM exits 143 with every worker gone, every log line carries the time, the
pid and the level, each worker logs each swap, and a client that hangs up mid-body leaves no
traceback."""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import time
from pathlib import Path

import httpx
import pytest

from tests.psp_core.models.test_registry import damage
from tests.psp_core.serving.test_model_watch import link_by_hand
from tests.psp_core.serving.test_serve import PSP_SCRIPT, Server, free_port, two_versions  # noqa: F401

#: a log line of any server process: time, pid, level
LOG_LINE = re.compile(
    r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3} (\d+) (DEBUG|INFO|WARNING|ERROR|CRITICAL) "
)


def worker_pids(server: Server, count: int = 2) -> set[int]:
    """The pids of the processes that answer (a new connection each time: the kernel picks)."""
    pids = set()
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and len(pids) < count:
        pids.add(httpx.get(f"{server.url}/health", timeout=10).json()["pid"])
    assert len(pids) == count
    return pids


def gone(pid: int) -> bool:
    """Ended (a zombie not yet reaped by whoever adopted it counts as ended)."""
    try:
        return Path(f"/proc/{pid}/status").read_text().split("State:")[1].split()[0] == "Z"
    except (FileNotFoundError, ProcessLookupError):
        return True


def wait_gone(pids: set[int], seconds: float) -> float:
    started = time.monotonic()
    while time.monotonic() - started < seconds:
        if all(gone(pid) for pid in pids):
            return time.monotonic() - started
        time.sleep(0.05)
    alive = [pid for pid in pids if not gone(pid)]
    for pid in alive:  # (not left behind by a failed test)
        os.kill(pid, signal.SIGKILL)
    raise AssertionError(f"workers {alive} still alive after {seconds} s")


def serve_once(*arguments: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [str(PSP_SCRIPT), "serve", *arguments], capture_output=True, text=True, timeout=120
    )


@pytest.mark.slow
def test_workers_stop_with_the_error_of_a_promoted_model_that_cannot_load(two_versions):  # noqa: F811
    storage, registry, first, second = two_versions
    damage(second.bundle)
    link_by_hand(registry, second.id)
    single = serve_once("--storage-root", str(storage), "--port", str(free_port()))
    several = serve_once(
        "--storage-root", str(storage), "--port", str(free_port()), "--workers", "2"
    )
    assert single.returncode == 2 and several.returncode == 2, several.stderr[-2000:]
    [line] = [ln for ln in single.stderr.splitlines() if ln.startswith("psp: error:")]
    assert "truncated" in line
    assert several.stderr.strip().splitlines()[-1] == line  # the same line, once
    assert "Traceback" not in several.stderr and "replaced" not in several.stderr


@pytest.mark.slow
def test_workers_end_when_the_supervisor_is_killed_and_each_logs_each_swap(two_versions):  # noqa: F811
    storage, registry, first, second = two_versions
    server = Server("--storage-root", str(storage), "--reload-interval", "0.2", "--workers", "2")
    try:
        pids = worker_pids(server)
        registry.promote(second.id, reason="swapped under two workers")
        deadline = time.monotonic() + 30
        swapped = set()
        while time.monotonic() < deadline and swapped != pids:
            health = httpx.get(f"{server.url}/health", timeout=10).json()
            if health["models"] == {"de": second.id}:
                swapped.add(health["pid"])
        assert swapped == pids
        os.kill(server.process.pid, signal.SIGKILL)
        server.process.wait(10)
        wait_gone(pids, 5.0)
    finally:
        if server.process.poll() is None:
            server.process.kill()
    err = server.process.stderr.read()
    lines = [line for line in err.splitlines() if line.strip()]
    logged = [line for line in lines if LOG_LINE.match(line)]
    assert logged and {int(LOG_LINE.match(line)[1]) for line in logged} >= pids
    for pid in pids:
        assert any(
            LOG_LINE.match(line)
            and int(LOG_LINE.match(line)[1]) == pid
            and f"de: serving version {second.id}" in line
            and f"was {first.id}" in line
            for line in lines
        ), err[-3000:]
        assert any(
            f" {pid} WARNING " in line and "supervisor" in line and "is gone" in line
            for line in lines
        ), err[-3000:]
    # every line is a log line but the banners (one per worker, with its pid)
    others = [line for line in lines if not LOG_LINE.match(line)]
    assert all(line.startswith("psp serve (pid ") for line in others), others


@pytest.mark.slow
def test_sigterm_exits_143_with_every_worker_gone_and_a_hang_up_leaves_no_traceback(
    two_versions,  # noqa: F811
):
    storage = two_versions[0]
    server = Server("--storage-root", str(storage), "--workers", "2")
    try:
        pids = worker_pids(server)
        for _ in range(4):  # (both workers, whichever the kernel picks)
            with socket.create_connection(("127.0.0.1", server.port), timeout=10) as client:
                client.sendall(
                    b"POST /v1/embeddings HTTP/1.1\r\nHost: x\r\nContent-Type: application/json"
                    b"\r\nContent-Length: 1000\r\n\r\n" + b'{"model": "de", "input": ["a'
                )
                time.sleep(0.2)  # the body's first bytes are read, then the client hangs up
        time.sleep(0.5)
        assert httpx.get(f"{server.url}/health", timeout=10).status_code == 200
        server.process.send_signal(signal.SIGTERM)
        _, err = server.process.communicate(timeout=60)
    finally:
        if server.process.poll() is None:
            server.process.kill()
    assert server.process.returncode == 143, err[-3000:]
    wait_gone(pids, 1.0)
    assert "Traceback" not in err and "Exception in ASGI" not in err, err[-3000:]
    assert err.strip().splitlines()[-1] == "psp: stopped by SIGTERM"
