"""What a client that never reads, and a worker that stops answering, may cost ``psp serve``: an
answer nobody reads is written with back-pressure and dropped after ``--send-timeout`` (the
worker's memory bounded meanwhile and given back after), and a worker whose event loop stops
(``kill -STOP``) is killed and replaced by the supervisor after ``--worker-timeout``."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time

import httpx
import numpy as np
import pytest

from psp_core.serving.connections import TRIM_DELAY
from tests.conftest import random_model
from tests.psp_core.serving.test_hostile_clients import Running
from tests.psp_core.serving.test_supervisor import gone, worker_pids

DIM = 1024  # (a paper-sized vector: a maximum answer is tens of megabytes of JSON)
CLIENTS = 12
SEND_TIMEOUT = 2.0
VECTORS_MB = 2048 * DIM * 4 / 2**20  # (one maximum answer's vectors, float32)
JSON_TYPE = {"Content-Type": "application/json"}
TCP_ESTABLISHED = 1  # (the first byte of Linux's struct tcp_info)


def maximum_request(toy) -> bytes:
    """A request of 2,048 inputs (the default --max-inputs), sent whole on a raw socket."""
    texts = [" ".join(pair) for pair in toy.pairs(2048)]
    body = json.dumps({"model": "de", "input": texts}).encode()
    head = b"POST /v1/embeddings HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
    return head + b"Content-Length: %d\r\n\r\n" % len(body) + body


def non_reader(port: int, request: bytes) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", port), timeout=10)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)  # (takes little of the answer)
    sock.sendall(request)
    return sock


def ended_by_the_server(sock: socket.socket) -> bool:
    """Whether the server closed or reset the connection (its kernel state, read without
    taking any of the answer: reading would let the server send more)."""
    return sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, 1)[0] != TCP_ESTABLISHED


def cut_short(sock: socket.socket, seconds: float) -> bool:
    """Whether the server ended the connection before the end of its answer: what it sent
    (the part its system had taken before it gave up) is read until the connection ends."""
    sock.settimeout(seconds)
    received = bytearray()
    try:
        while chunk := sock.recv(1 << 20):
            received += chunk
    except ConnectionResetError:
        return True
    except TimeoutError:
        return False  # (still open)
    return received.startswith(b"HTTP/1.1 200") and not received.endswith(b"}\r\n0\r\n\r\n")


@pytest.mark.slow
def test_answers_nobody_reads_are_bounded_and_given_up_after_the_send_timeout(
    tmp_path, tokenizer, toy
):
    bundle = random_model(tokenizer, dim=DIM).save(tmp_path / "bundle")
    server = Running(bundle, "--send-timeout", str(SEND_TIMEOUT))
    request = maximum_request(toy)
    try:
        # measured from a server that answered such requests to a client that read them (its
        # word cache, which keeps a word seen again, and its allocator warm): what is left
        # after is what the unread answers left
        head, body = request.split(b"\r\n\r\n", 1)
        for _ in range(3):
            read_whole = httpx.post(
                f"{server.url}/v1/embeddings", content=body, headers=JSON_TYPE, timeout=120
            )
            assert read_whole.status_code == 200
        time.sleep(2 * TRIM_DELAY)
        before, peaks, afters = server.rss_mb(), [], []
        # three rounds: what the allocator keeps after a round varies by tens of MB from round
        # to round, while answers kept by mistake would add to it each round
        for _ in range(3):
            clients = [non_reader(server.port, request) for _ in range(CLIENTS)]
            peak, held_since, ended_at = 0.0, time.monotonic(), None
            # (the answers are made, the clients take none for the timeout, the server ends
            # their connections and asks the allocator to give the memory back a second later)
            while time.monotonic() - held_since < 3 * SEND_TIMEOUT + 2:
                peak = max(peak, server.rss_mb())
                if ended_at is None and all(ended_by_the_server(sock) for sock in clients):
                    ended_at = time.monotonic()
                if ended_at is not None and time.monotonic() - ended_at > 2 * TRIM_DELAY:
                    break
                time.sleep(0.1)
            assert ended_at is not None, "the server kept connections nobody read from"
            assert ended_at - held_since >= SEND_TIMEOUT  # (not before the client had its time)
            peaks.append(peak - before)
            afters.append(server.rss_mb() - before)
            assert all(cut_short(sock, 10) for sock in clients)
            for sock in clients:
                sock.close()
        # whole, the JSON of these answers would hold over 700 MB for as long as the clients
        # stay; streamed, each holds its vectors and a piece at most (docs/serving.md)
        assert max(peaks) < CLIENTS * 35, (before, peaks, afters)
        assert max(afters) < CLIENTS * 12, (before, peaks, afters)
        # nothing more kept round after round: two rounds add less than half of what keeping
        # each client's vectors would
        assert afters[-1] - afters[0] < 2 * CLIENTS * VECTORS_MB / 2, (before, peaks, afters)
        # and a client that reads gets the whole answer, the same vectors as a small request's
        texts = [" ".join(pair) for pair in toy.pairs(600)]
        large = httpx.post(
            f"{server.url}/v1/embeddings", json={"model": "de", "input": texts}, timeout=60
        )
        small = httpx.post(
            f"{server.url}/v1/embeddings", json={"model": "de", "input": texts[-3:]}, timeout=60
        )
        assert large.status_code == small.status_code == 200
        rows = [item["embedding"] for item in large.json()["data"]]
        assert [item["index"] for item in large.json()["data"]] == list(range(600))
        np.testing.assert_allclose(
            rows[-3:], [item["embedding"] for item in small.json()["data"]], atol=1e-6
        )
    finally:
        err = server.stop()
    assert err.count(f"not read within {SEND_TIMEOUT:g} s") == 0  # (logged at info only)


@pytest.mark.slow
def test_a_worker_stopped_with_sigstop_is_killed_and_replaced(tmp_path, model):
    server = Running(model.save(tmp_path / "bundle"), "--workers", "2", "--worker-timeout", "2")
    try:
        first = worker_pids(server)
        stopped = min(first)
        os.kill(stopped, signal.SIGSTOP)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and not gone(stopped):
            time.sleep(0.2)
        assert gone(stopped), "the stopped worker is still there"
        answered = worker_pids(server)  # a new worker beside the one left
        assert stopped not in answered and len(answered - first) == 1
        for _ in range(40):  # every new connection answered: none reaches the stopped worker
            assert httpx.get(f"{server.url}/health", timeout=5).status_code == 200
    finally:
        err = server.stop()
    (line,) = [x for x in err.splitlines() if "did not answer" in x]
    assert f" {stopped} did not answer for 2 s (--worker-timeout): killed and replaced" in line
    assert "Traceback" not in err


@pytest.mark.parametrize(
    ("operator_pool", "expected"), [(None, "system"), ("mimalloc", "mimalloc")]
)
def test_a_server_has_pyarrow_allocate_from_malloc_unless_the_operator_chose(
    operator_pool, expected
):
    """The word cache's pyarrow allocates where the server gives freed memory back (malloc),
    not in a pool of its own that keeps it; ARROW_DEFAULT_MEMORY_POOL set by hand stands."""
    environment = {k: v for k, v in os.environ.items() if k != "ARROW_DEFAULT_MEMORY_POOL"}
    if operator_pool:
        environment["ARROW_DEFAULT_MEMORY_POOL"] = operator_pool
    probe = (
        "from psp_core.serving.server import allocate_arrow_from_malloc\n"
        "import pyarrow, pyarrow.compute as pc\n"
        "allocate_arrow_from_malloc()\n"
        "pc.utf8_split_whitespace(pyarrow.array(['a b'] * 1000))\n"
        "print(pyarrow.default_memory_pool().backend_name)"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], env=environment, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == expected
