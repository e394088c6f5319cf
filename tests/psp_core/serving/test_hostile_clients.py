"""``psp serve`` facing clients that are wrong or hostile: without the key, from a browser page of
another origin, with floods of headers or connections, idle or half-sent requests, requests
beyond the concurrency limit, blank inputs, and clients that hang up. Each answer is a 4xx or a
closed connection; the server goes on serving, its memory bounded.

The app's own checks run in process (Starlette's TestClient over a real toy model); the
connection limits run against a real ``psp serve`` on 127.0.0.1."""

from __future__ import annotations

import os
import resource
import socket
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

httpx = pytest.importorskip("httpx")

from tests.psp_core.serving.test_serve import Server, free_port  # noqa: E402 (after the skip)

PSP_SCRIPT = Path(sys.executable).with_name("psp")
KEY = "k-3f9a"


@pytest.fixture()
def served(tmp_path, model):
    """A ModelSet over the toy model's bundle, served under the name de."""
    from psp_core.serving.models import ModelSet

    bundle = model.save(tmp_path / "bundle")
    return ModelSet({"de": bundle})


def client_of(models, **options):
    from starlette.testclient import TestClient

    from psp_core.serving.app import create_app

    return TestClient(create_app(models, **options))


def embed_body(texts) -> dict:
    return {"model": "de", "input": texts}


# --- keys -------------------------------------------------------------------------------------


def test_with_keys_a_request_without_a_matching_bearer_gets_401_in_openais_shape(served):
    client = client_of(served, api_keys=(KEY, "second-key"))
    for headers in (
        {},
        {"Authorization": "Bearer wrong"},
        {"Authorization": f"Bearer {KEY}x"},
        {"Authorization": f"Basic {KEY}"},
        {"Authorization": KEY},
    ):
        for method, path in (("POST", "/v1/embeddings"), ("GET", "/v1/models"), ("GET", "/x")):
            response = client.request(method, path, json=embed_body("hi"), headers=headers)
            assert response.status_code == 401, (headers, path)
            error = response.json()["error"]
            assert error["code"] == "invalid_api_key" and error["type"] == "invalid_request_error"
            assert KEY not in response.text and "wrong" not in response.text
            assert response.headers["www-authenticate"] == "Bearer"
    for key in (KEY, "second-key"):
        ok = client.post(
            "/v1/embeddings", json=embed_body("hi"), headers={"Authorization": f"Bearer {key}"}
        )
        assert ok.status_code == 200
    health = client.get("/health")  # open: a load balancer's probe has no key
    assert health.status_code == 200 and health.json()["status"] == "ok"


def test_the_cli_takes_keys_from_flags_and_the_environment(monkeypatch):
    from psp_core.cli.main import build_parser
    from psp_core.cli.serve import api_keys

    args = build_parser().parse_args(["serve", "--api-key", "a", "--api-key", "b"])
    monkeypatch.setenv("PSP_API_KEY", "c, d,,a")
    assert api_keys(args) == ("a", "b", "c", "d")
    monkeypatch.setenv("PSP_API_KEY", "")
    assert api_keys(build_parser().parse_args(["serve"])) == ()


def test_a_non_loopback_host_without_a_key_refuses_to_start(tmp_path):
    environment = {k: v for k, v in os.environ.items() if k != "PSP_API_KEY"}
    for host in ("0.0.0.0", "::"):
        completed = subprocess.run(
            [str(PSP_SCRIPT), "serve", "--model", f"de={tmp_path}", "--host", host],
            capture_output=True,
            text=True,
            timeout=60,
            env=environment,
        )
        assert completed.returncode == 2
        lines = completed.stderr.strip().splitlines()
        assert len(lines) == 1 and "--api-key" in lines[0] and "--allow-unauthenticated" in lines[0]
    # with --allow-unauthenticated it goes on (here to the empty model folder's error)
    completed = subprocess.run(
        [str(PSP_SCRIPT), "serve", "--model", f"de={tmp_path}", "--host", "0.0.0.0"]
        + ["--allow-unauthenticated", "--port", str(free_port())],
        capture_output=True,
        text=True,
        timeout=60,
        env=environment,
    )
    assert completed.returncode != 0 and "--allow-unauthenticated" not in completed.stderr


# --- what a browser can send ------------------------------------------------------------------


def test_only_application_json_bodies_are_taken(served):
    client = client_of(served)
    body = b'{"model": "de", "input": "hi"}'
    for content_type in (None, "text/plain", "application/x-www-form-urlencoded", "multipart/x"):
        headers = {"Content-Type": content_type} if content_type else {}
        response = client.post("/v1/embeddings", content=body, headers=headers)
        assert response.status_code == 415, content_type
        assert "application/json" in response.json()["error"]["message"]
    for content_type in ("application/json", "Application/JSON; charset=utf-8"):
        response = client.post(
            "/v1/embeddings", content=body, headers={"Content-Type": content_type}
        )
        assert response.status_code == 200, content_type


def test_cors_headers_only_for_the_origins_given(served):
    origin = {"Origin": "https://evil.example"}
    plain = client_of(served).post("/v1/embeddings", json=embed_body("hi"), headers=origin)
    assert plain.status_code == 200
    assert not any(name.startswith("access-control-") for name in plain.headers)
    preflight = client_of(served).options(
        "/v1/embeddings",
        headers={**origin, "Access-Control-Request-Method": "POST"},
    )
    assert "access-control-allow-origin" not in preflight.headers

    allowed = client_of(served, cors_origins=("https://app.example",), api_keys=(KEY,))
    asked = {
        "Origin": "https://app.example",
        "Access-Control-Request-Method": "POST",
        "Access-Control-Request-Headers": "authorization, content-type",
    }
    preflight = allowed.options("/v1/embeddings", headers=asked)  # no key on a preflight
    assert preflight.status_code == 200
    assert preflight.headers["access-control-allow-origin"] == "https://app.example"
    answer = allowed.post(
        "/v1/embeddings",
        json=embed_body("hi"),
        headers={"Origin": "https://app.example", "Authorization": f"Bearer {KEY}"},
    )
    assert answer.headers["access-control-allow-origin"] == "https://app.example"
    assert "x-psp-model-version" in answer.headers["access-control-expose-headers"].lower()
    other = allowed.options("/v1/embeddings", headers={**asked, **origin})
    assert other.headers.get("access-control-allow-origin") != "https://evil.example"


# --- blank input, version header ---------------------------------------------------------------


def test_empty_or_blank_input_gets_400_naming_its_index(served):
    client = client_of(served)
    for texts, index in (("", 0), ("   ", 0), (["ok", "\t \n"], 1), (["a", "b", ""], 2)):
        response = client.post("/v1/embeddings", json=embed_body(texts))
        assert response.status_code == 400, texts
        error = response.json()["error"]
        assert f"input {index} is empty or blank" in error["message"] and error["param"] == "input"
    # many inputs (embedded in pieces in worker threads): the index is the request's
    texts = [f"sentence number {i}" for i in range(600)]
    texts[517] = "\u200b"  # not blank to str.strip, but nothing to embed once normalized
    response = client.post("/v1/embeddings", json=embed_body(texts))
    assert response.status_code == 400
    assert "input 517 has nothing to embed" in response.json()["error"]["message"]
    texts[517], texts[300] = "fine", "👍 ωψχ"  # no piece the vocabulary knows
    response = client.post("/v1/embeddings", json=embed_body(texts))
    assert response.status_code == 400
    assert "input 300 has nothing to embed" in response.json()["error"]["message"]


def test_every_embeddings_answer_names_its_model_version(served):
    client = client_of(served)
    version = served.get("de").version
    small = client.post("/v1/embeddings", json=embed_body("hi"))
    large = client.post("/v1/embeddings", json=embed_body([f"s {i} word" for i in range(700)]))
    for response in (small, large):
        assert response.status_code == 200 and response.headers["x-psp-model-version"] == version
    data = large.json()["data"]
    assert [item["index"] for item in data] == list(range(700))
    vectors = np.array([item["embedding"] for item in data])
    np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1, atol=1e-5)
    want = served.get("de").model.embed([f"s {i} word" for i in range(700)], normalize=True)
    np.testing.assert_allclose(vectors, want, atol=1e-6)


def test_a_large_request_is_cut_into_pieces_of_bounded_work():
    """Each piece is embedded in one worker-thread call, the event loop free between two: a
    piece is at most PIECE_INPUTS inputs and PIECE_CHARACTERS characters, or one longer input
    (benchmarks/RESULTS.md#serve-fairness measures what a small request waits)."""
    from psp_core.serving.app import PIECE_CHARACTERS, PIECE_INPUTS, _pieces

    texts = ["w" * (700 * 6)] * 2048 + ["x"] * 1000 + ["y" * (PIECE_CHARACTERS * 2)] + ["z"]
    pieces = _pieces(texts)
    assert pieces[0][0] == 0 and pieces[-1][1] == len(texts)
    assert all(a[1] == b[0] for a, b in zip(pieces, pieces[1:], strict=False))
    for start, stop in pieces:
        size = sum(map(len, texts[start:stop]))
        assert stop - start <= PIECE_INPUTS
        assert size <= PIECE_CHARACTERS or stop - start == 1
    assert len(pieces) > 2048 * 700 * 6 // PIECE_CHARACTERS


# --- a real server: connections and concurrency ------------------------------------------------


class Running(Server):
    """``psp serve`` of the toy bundle on 127.0.0.1 (its stderr kept), ready when returned;
    ``key`` given to it as ``PSP_API_KEY``."""

    def __init__(self, bundle: Path, *arguments: str, key: str | None = None) -> None:
        environment = {k: v for k, v in os.environ.items() if k != "PSP_API_KEY"}
        if key is not None:
            environment["PSP_API_KEY"] = key
        super().__init__("--model", f"de={bundle}", *arguments, env=environment)

    def rss_mb(self) -> float:
        return self.rss_kb() / 1024

    def cpu_seconds(self) -> float:
        fields = Path(f"/proc/{self.process.pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def connect(self) -> socket.socket:
        return socket.create_connection(("127.0.0.1", self.port), timeout=10)

    def embed(self, texts, **headers) -> httpx.Response:
        return httpx.post(f"{self.url}/v1/embeddings", json=embed_body(texts), headers=headers)


def answer_of(sock: socket.socket, limit: float = 10) -> bytes:
    """What the server sends before it closes the connection (or ``limit`` seconds pass)."""
    sock.settimeout(limit)
    received = b""
    try:
        while chunk := sock.recv(65536):
            received += chunk
    except (TimeoutError, ConnectionResetError):
        pass
    return received


@pytest.fixture()
def bundle(tmp_path, model) -> Path:
    return model.save(tmp_path / "bundle")


@pytest.mark.slow
def test_header_floods_get_431_and_leave_no_memory_behind(bundle):
    server = Running(bundle)
    try:
        before = server.rss_mb()
        body = b'{"model": "de", "input": "hi"}'
        start = (
            b"POST /v1/embeddings HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            b"Content-Length: %d\r\n" % len(body)
        )
        many = b"".join(b"X-H%d: v\r\n" % i for i in range(5_000))
        with server.connect() as sock:
            sock.sendall(start + many + b"\r\n" + body)
            assert answer_of(sock).startswith(b"HTTP/1.1 431 ")
        with server.connect() as sock:
            sock.sendall(start + b"X-Big: " + b"v" * (1 << 20) + b"\r\n\r\n" + body)
            assert answer_of(sock).startswith(b"HTTP/1.1 431 ")
        # 256 MB of headers: refused after the limit, the rest never read
        with server.connect() as sock:
            sock.sendall(start)
            sent, chunk = 0, b"X-Flood: " + b"v" * 65_000 + b"\r\n"
            try:
                while sent < 256 << 20:
                    sock.sendall(chunk)
                    sent += len(chunk)
            except (BrokenPipeError, ConnectionResetError):
                pass
            assert sent < 64 << 20  # the server closed the connection long before the end
        ok = server.embed("still serving")
        assert ok.status_code == 200
        assert server.rss_mb() - before < 100
    finally:
        server.stop()


@pytest.mark.slow
def test_idle_connections_are_closed_within_the_default_keep_alive_timeout(bundle):
    server = Running(bundle)
    try:
        idle = [server.connect() for _ in range(20)]
        started = time.monotonic()
        for sock in idle:  # closed by the server within 12 s, nothing sent
            left = max(0.1, 12 - (time.monotonic() - started))
            assert answer_of(sock, limit=left) == b""
            assert time.monotonic() - started < 12
            sock.close()
        assert server.embed("still serving").status_code == 200
    finally:
        server.stop()


@pytest.mark.slow
def test_a_request_that_never_finishes_arriving_gets_408(bundle):
    server = Running(bundle, "--request-timeout", "2")
    try:
        half = server.connect()
        half.sendall(
            b"POST /v1/embeddings HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            b"Content-Length: 100\r\n\r\n{"
        )
        started = time.monotonic()
        assert answer_of(half).startswith(b"HTTP/1.1 408 ")
        assert 1.5 < time.monotonic() - started < 8
        half.close()
        err = server.stop()
        assert "Traceback" not in err, err
    finally:
        if server.process.poll() is None:
            server.stop()


@pytest.mark.slow
def test_beyond_max_connections_new_ones_are_refused_fast_and_memory_stays_bounded(bundle):
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, max(soft, 4096)), hard))
    server = Running(bundle, "--max-connections", "200", "--keep-alive-timeout", "30")
    held = []
    try:
        before = server.rss_mb()
        held = [server.connect() for _ in range(200)]
        time.sleep(0.5)
        started = time.monotonic()
        with server.connect() as extra:
            assert answer_of(extra).startswith(b"HTTP/1.1 503 ")
        assert time.monotonic() - started < 5
        # a flood of connections opened and dropped: each refused at once
        for _ in range(2_000):
            server.connect().close()
        for sock in held[:50]:
            sock.close()
        time.sleep(0.5)
        assert server.embed("served again").status_code == 200
        assert server.rss_mb() - before < 100
    finally:
        for sock in held:
            sock.close()
        server.stop()


@pytest.mark.slow
def test_beyond_max_concurrent_requests_429_with_retry_after(bundle):
    server = Running(bundle, "--max-concurrent-requests", "2")
    try:
        waiting = []
        for _ in range(2):  # two requests in progress: their bodies never end
            sock = server.connect()
            sock.sendall(
                b"POST /v1/embeddings HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                b"Content-Length: 100\r\n\r\n{"
            )
            waiting.append(sock)
        time.sleep(0.5)
        refused = server.embed("a third")
        assert refused.status_code == 429 and refused.headers["retry-after"] == "1"
        assert refused.json()["error"]["code"] == "rate_limit_exceeded"
        assert httpx.get(f"{server.url}/health").status_code == 200
        for sock in waiting:  # clients that hang up mid-body: nothing to log
            sock.close()
        time.sleep(0.5)
        assert server.embed("served again").status_code == 200
        err = server.stop()
        assert "Traceback" not in err and "Exception" not in err, err
    finally:
        if server.process.poll() is None:
            server.stop()


@pytest.mark.slow
def test_a_client_that_hangs_up_stops_its_own_work(bundle, toy):
    """A client hangs up once the server has spent a sixth of what its large request costs: the
    server spends well under the whole cost (CPU time, whatever the machine's load: not a race
    of wall-clock times)."""
    import random

    rng = random.Random(5)
    words = list(toy.source_words)
    texts = [
        " ".join(rng.choice(words) + str(rng.randrange(1000)) for _ in range(700))
        for _ in range(2048)
    ]  # a request of the largest kind: 2,048 inputs of 700 words (under 16 MiB)
    payload = httpx.Request("POST", "http://x/", json=embed_body(texts)).content
    server = Running(bundle)
    try:
        request = (
            b"POST /v1/embeddings HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            b"Content-Length: %d\r\n\r\n" % len(payload) + payload
        )
        before = server.cpu_seconds()
        with server.connect() as sock:
            sock.sendall(request)
            assert answer_of(sock, limit=300).startswith(b"HTTP/1.1 200 ")
        whole = server.cpu_seconds() - before
        assert whole > 0.3, f"the large request ({whole:.2f} s of CPU) is too quick to tell"
        before = server.cpu_seconds()
        with server.connect() as sock:
            sock.sendall(request)
            deadline = time.monotonic() + 120
            while server.cpu_seconds() - before < whole / 6 and time.monotonic() < deadline:
                time.sleep(0.01)
        spent = server.cpu_seconds() - before
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:  # until the server is idle again
            time.sleep(1.0)
            now = server.cpu_seconds() - before
            if now - spent < 0.05:
                break
            spent = now
        print(f"whole request {whole:.2f} s of CPU; hung up: {spent:.2f} s")
        assert spent < whole * 0.6, (spent, whole)
        err = server.stop()
        assert "Traceback" not in err
    finally:
        if server.process.poll() is None:
            server.stop()


@pytest.mark.slow
def test_the_openai_client_with_its_api_key_against_a_keyed_server(bundle):
    openai = pytest.importorskip("openai")
    server = Running(bundle, key=KEY)
    try:
        client = openai.OpenAI(base_url=f"{server.url}/v1", api_key=KEY, max_retries=0)
        raw = client.embeddings.with_raw_response.create(model="de", input=["ein Satz"])
        assert raw.headers["x-psp-model-version"] == bundle.name
        assert len(raw.parse().data[0].embedding) == 16
        wrong = openai.OpenAI(base_url=f"{server.url}/v1", api_key="nope", max_retries=0)
        with pytest.raises(openai.AuthenticationError, match="invalid_api_key"):
            wrong.embeddings.create(model="de", input=["ein Satz"])
        assert server.embed("no key").status_code == 401
        err = server.stop()
        assert KEY not in err and "1 API key(s)" in err
    finally:
        if server.process.poll() is None:
            server.stop()
