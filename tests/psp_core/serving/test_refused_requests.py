"""A refused request stops costing: a client that goes on sending its body after the server said
401 (no key) or 413 (too large), with a huge Content-Length or a chunked body without end, gets
its answer with ``Connection: close``, and the connection is closed after at most a small drain
(docs/serving.md): the server spends a fraction of a second of CPU on it, not the request
timeout's worth of reading."""

from __future__ import annotations

import socket
import threading
import time

import pytest

from psp_core.serving.connections import DRAIN_SECONDS

httpx = pytest.importorskip("httpx")

from tests.psp_core.serving.test_hostile_clients import Running  # noqa: E402 (after the skip)

KEY = "k-refused"
CHUNK = b"x" * 65536


def _send_forever(sock: socket.socket, chunked: bool, stop: threading.Event, sent: list) -> None:
    piece = b"%x\r\n%s\r\n" % (len(CHUNK), CHUNK) if chunked else CHUNK
    try:
        while not stop.is_set():
            sock.sendall(piece)
            sent[0] += len(piece)
    except OSError:  # the server closed the connection: what this test waits for
        sent[1] = time.monotonic()


def _head(sock: socket.socket, limit: float = 10) -> bytes:
    sock.settimeout(limit)
    received = b""
    while b"\r\n\r\n" not in received:
        chunk = sock.recv(65536)
        if not chunk:
            break
        received += chunk
    return received.split(b"\r\n\r\n")[0]


@pytest.mark.slow
@pytest.mark.parametrize("chunked", [False, True], ids=["huge-content-length", "chunked-forever"])
@pytest.mark.parametrize("refusal", ["401", "413"])
def test_a_refused_body_is_not_read_on(tmp_path, model, chunked, refusal) -> None:
    server = Running(
        model.save(tmp_path / "bundle"), "--api-key", KEY, "--max-body-bytes", "100000"
    )
    try:
        cpu_before = server.cpu_seconds()
        sock = socket.create_connection(("127.0.0.1", server.port), timeout=10)
        framing = (
            b"Transfer-Encoding: chunked\r\n" if chunked else b"Content-Length: %d\r\n" % 10**12
        )
        key = b"Authorization: Bearer %s\r\n" % KEY.encode() if refusal == "413" else b""
        sock.sendall(
            b"POST /v1/embeddings HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            + key + framing + b"\r\n"
        )  # fmt: skip
        stop, sent = threading.Event(), [0, None]
        sender = threading.Thread(target=_send_forever, args=(sock, chunked, stop, sent))
        sender.start()
        head = _head(sock)
        answered = time.monotonic()
        assert head.startswith(b"HTTP/1.1 " + refusal.encode()), head
        assert b"connection: close" in head.lower(), head
        sender.join(timeout=DRAIN_SECONDS + 10)
        stop.set()
        assert sent[1] is not None, "the server never closed the connection"
        assert sent[1] - answered < DRAIN_SECONDS + 5
        assert server.cpu_seconds() - cpu_before < 1.5  # (not seconds of reading on)
        sock.close()
        # and the server goes on serving
        ok = httpx.post(
            f"{server.url}/v1/embeddings",
            json={"model": "de", "input": "hi"},
            headers={"Authorization": f"Bearer {KEY}"},
        )
        assert ok.status_code == 200
    finally:
        server.stop()
