"""``psp serve`` as an operator and a client see its edges: flags a server cannot run with are one
line before it starts; every refusal, the connection cap's 503 included, is a JSON error in
OpenAI's shape (the 503 with ``Retry-After``); a trailing slash is served or 404, never a
redirect built from the client's Host header; SIGHUP stops a single-process server as it stops
``--workers`` (exit 129, one line, no traceback)."""

from __future__ import annotations

import json
import signal
import time

import pytest

from psp_core.cli import main

httpx = pytest.importorskip("httpx")

from tests.psp_core.serving.test_hostile_clients import (  # noqa: E402 (after the skip)
    Running,
    answer_of,
    client_of,
    embed_body,
)


@pytest.mark.parametrize(
    ("flag", "value", "fragment"),
    [
        ("--reload-interval", "0", "above 0"),
        ("--reload-interval", "-1", "above 0"),
        ("--reload-interval", "nan", "above 0"),
        ("--reload-interval", "1e-9", "at least 0.1"),
        ("--worker-timeout", "1e-9", "at least 1"),
        ("--worker-timeout", "inf", "finite"),
        ("--send-timeout", "0.01", "at least 1"),
        ("--send-timeout", "-5", "above 0"),
        ("--threads", "0", "at least 1"),
        ("--request-timeout", "inf", "finite"),
        ("--cors-origin", "https://app.example.com/", "no path"),
        ("--cors-origin", "*", "scheme://host[:port]"),
        ("--cors-origin", "app.example.com", "scheme://host[:port]"),
        ("--cors-origin", "ftp://app.example.com", "scheme://host[:port]"),
        ("--cors-origin", "http://localhost:99999", "scheme://host[:port]"),
    ],
)
def test_a_flag_a_server_cannot_run_with_is_refused(tmp_path, capsys, flag, value, fragment):
    with pytest.raises(SystemExit) as stopped:
        main(["serve", "--model", f"de={tmp_path}", flag, value])
    assert stopped.value.code == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and f"argument {flag}:" in err and fragment in err, err


def test_origins_and_intervals_that_are_fine_are_taken(tmp_path):
    from psp_core.cli.main import build_parser

    argv = ["serve", "--model", f"de={tmp_path}", "--reload-interval", "0.5", "--threads", "2"]
    for origin in ("https://app.example.com", "http://localhost:3000", "http://[::1]:8080"):
        argv += ["--cors-origin", origin]
    args = build_parser().parse_args(argv)
    assert args.reload_interval == 0.5 and args.threads == 2 and len(args.cors_origin) == 3


def test_a_trailing_slash_is_served_and_an_unknown_path_is_404_json(served):
    client = client_of(served)
    want = client.post("/v1/embeddings", json=embed_body("hi")).json()["data"]
    for path in ("/v1/embeddings/", "/embeddings/"):
        response = client.post(path, json=embed_body("hi"), follow_redirects=False)
        assert response.status_code == 200 and response.json()["data"] == want
    for path in ("/v1/models/", "/v1/embedding", "/x/"):
        response = client.get(path, follow_redirects=False, headers={"Host": "evil.example"})
        assert response.status_code in (404, 405) and "location" not in response.headers
        assert response.json()["error"]["type"] == "invalid_request_error"


@pytest.fixture()
def served(tmp_path, model):
    from psp_core.serving.models import ModelSet

    return ModelSet({"de": model.save(tmp_path / "bundle")})


@pytest.mark.slow
def test_refusals_are_json_and_the_connection_cap_says_when_to_retry(tmp_path, model):
    server = Running(model.save(tmp_path / "bundle"), "--max-connections", "2")
    held = []
    try:
        held = [server.connect() for _ in range(2)]
        with server.connect() as extra:
            head, _, body = answer_of(extra).partition(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 503 ") and b"retry-after: 1" in head.lower()
        assert json.loads(body)["error"]["code"] == "server_overloaded"
        for sock in held:
            sock.close()
        held = []
        with server.connect() as sock:  # too many headers: 431, also JSON
            flood = b"".join(b"X-H%d: v\r\n" % i for i in range(5_000))
            sock.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n" + flood + b"\r\n")
            head, _, body = answer_of(sock).partition(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 431 ") and b"application/json" in head
        assert json.loads(body)["error"]["type"] == "invalid_request_error"
    finally:
        for sock in held:
            sock.close()
        server.stop()


@pytest.mark.slow
@pytest.mark.parametrize("workers", ["1", "2"])
def test_sighup_stops_the_server_in_one_line_in_both_modes(tmp_path, model, workers):
    server = Running(model.save(tmp_path / "bundle"), "--workers", workers)
    assert server.embed("hi").status_code == 200
    server.process.send_signal(signal.SIGHUP)
    _, err = server.process.communicate(timeout=60)
    assert server.process.returncode == 129, err
    assert "Traceback" not in err and err.strip().splitlines()[-1] == "psp: stopped by SIGHUP"


@pytest.mark.slow
def test_workers_hold_no_semaphore_a_stop_could_leave_behind(tmp_path, model):
    """A worker ended by a signal before it could release its multiprocessing semaphores (a
    stop while it still loaded) left one to the resource tracker, whose warning then followed
    the supervisor's one line (1 stop in about 30 under load). Workers now hold none: no named
    semaphore is mapped in any of them after they served, and the stop is one line."""
    from pathlib import Path

    server = Running(model.save(tmp_path / "bundle"), "--workers", "2")
    try:
        for _ in range(20):  # (spread over both workers by the kernel)
            assert server.embed(["a cat sleeps", "the old man"]).status_code == 200
        children = Path(f"/proc/{server.process.pid}/task/{server.process.pid}/children")
        pids = children.read_text().split()
        assert len(pids) >= 2, pids  # the workers (and the resource tracker)
        for pid in pids:
            maps = Path(f"/proc/{pid}/maps").read_text()
            assert "/dev/shm/sem." not in maps, (pid, Path(f"/proc/{pid}/cmdline").read_bytes())
    finally:
        server.process.send_signal(signal.SIGHUP)
        _, err = server.process.communicate(timeout=60)
    assert server.process.returncode == 129, err
    assert "Traceback" not in err and "leaked" not in err, err
    assert err.strip().splitlines()[-1] == "psp: stopped by SIGHUP", err


@pytest.mark.slow
def test_two_servers_started_at_once_on_one_port_one_serves(tmp_path, model):
    """Workers share their port (SO_REUSEPORT): without the port's lock a second `psp serve
    --workers 2` would bind it too and take half the requests with other models."""
    import subprocess
    import sys
    from pathlib import Path

    from tests.psp_core.serving.test_serve import free_port

    bundle, port = model.save(tmp_path / "bundle"), free_port()
    psp = Path(sys.executable).with_name("psp")
    argv = [str(psp), "serve", "--model", f"de={bundle}", "--port", str(port), "--workers", "2"]
    started = [
        subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        for _ in range(2)
    ]
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and all(p.poll() is None for p in started):
            time.sleep(0.2)
        refused = [p for p in started if p.poll() is not None]
        assert len(refused) == 1, "both servers are running on one port"
        err = refused[0].stderr.read()
        assert refused[0].returncode == 2 and "Traceback" not in err, err
        (line,) = [x for x in err.splitlines() if x.startswith("psp: error:")]
        assert f"port {port} is already served by another psp serve (pid" in line or (
            "cannot listen" in line
        ), line
        serving = next(p for p in started if p.poll() is None)
        url = f"http://127.0.0.1:{port}/v1/embeddings"
        for _ in range(100):  # every answer from the one server
            try:
                answer = httpx.post(url, json=embed_body("hi"), timeout=5)
            except httpx.TransportError:
                time.sleep(0.2)
                continue
            assert answer.status_code == 200
        assert serving.poll() is None
    finally:
        for process in started:
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
                process.communicate(timeout=60)


def test_a_version_a_header_cannot_carry_is_refused_at_promotion(tmp_path, model, capsys):
    from psp_core.models.registry import ModelRegistry, RegistryError

    registry = ModelRegistry(tmp_path / "storage" / "de" / "psp_model")
    first = registry.add_version("a" * 24, lambda path: model.save(path) and {})
    for bad in ("früh-1", "line\r\nbreak", "tab\there"):
        renamed = first.directory.with_name(bad)
        first.directory.rename(renamed)
        with pytest.raises(RegistryError, match="printable ASCII only"):
            registry.promote(bad, reason="by hand")
        argv = ["models", "promote", "de", bad, "--storage-root", str(tmp_path / "storage")]
        assert main(argv) == 2
        (line,) = [x for x in capsys.readouterr().err.splitlines() if x.startswith("psp:")]
        assert "printable ASCII only" in line
        renamed.rename(first.directory)
        assert registry.promoted() is None  # nothing moved


def test_the_version_header_is_always_a_valid_header_value():
    from psp_core.serving.app import header_value

    assert header_value("20261207T031500Z-1a2b3c4d") == "20261207T031500Z-1a2b3c4d"
    for odd in ("früh", "a\r\nX-Injected: 1", "tab\there"):
        value = header_value(odd)
        assert value.isascii() and value.isprintable() and "\r" not in value and "\n" not in value


def test_health_says_degraded_while_embeddings_requests_fail(served, monkeypatch):
    from starlette.testclient import TestClient

    from psp_core.serving.app import create_app

    client = TestClient(create_app(served), raise_server_exceptions=False)
    assert client.get("/health").json()["status"] == "ok"
    model = served.get("de").model
    broken = {"on": True}
    real = model.embed_ids

    def embed_ids(*args, **kwargs):
        if broken["on"]:
            raise MemoryError("the test's")
        return real(*args, **kwargs)

    monkeypatch.setattr(model, "embed_ids", embed_ids)
    for _ in range(2):
        assert client.post("/v1/embeddings", json=embed_body("hi")).status_code == 500
    health = client.get("/health").json()
    assert health["status"] == "degraded" and "2 embeddings request(s) failed" in str(health)
    assert "MemoryError" in health["problems"]["requests"]
    broken["on"] = False
    assert client.post("/v1/embeddings", json=embed_body("hi")).status_code == 200
    assert client.get("/health").json()["status"] == "ok"


def test_every_serve_flag_is_in_the_docs_and_every_limit_in_the_limits_table():
    import dataclasses
    from pathlib import Path

    from psp_core.cli.main import build_parser
    from psp_core.serving.limits import Limits

    commands = next(a for a in build_parser()._actions if a.dest == "command")
    flags = {
        option
        for action in commands.choices["serve"]._actions
        for option in action.option_strings
        if option.startswith("--") and option != "--help"
    }
    docs = (Path(__file__).parents[3] / "docs" / "serving.md").read_text()
    assert sorted(flag for flag in flags if flag not in docs) == []
    rows = [line for line in docs.splitlines() if line.startswith("| `--")]
    for field in dataclasses.fields(Limits):
        flag = "--" + field.name.replace("_", "-")
        assert flag in flags, flag  # (each limit is a flag)
        assert [row for row in rows if row.startswith(f"| `{flag}`")], f"{flag}: no table row"
