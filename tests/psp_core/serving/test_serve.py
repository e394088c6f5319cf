"""``psp serve`` as users call it: the real ``openai`` client against 127.0.0.1, bad requests that
get OpenAI-shaped 4xx errors while the server goes on, and a promotion swapped in under load
without a failed request."""

from __future__ import annotations

import base64
import json
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest
import torch

from psp_core.inference.model import load_model
from psp_core.models.registry import ModelRegistry
from tests.child_signals import default_sigint

openai = pytest.importorskip("openai")
httpx = pytest.importorskip("httpx")

PSP_SCRIPT = Path(sys.executable).with_name("psp")
SENTENCES = [
    "the old man reads a long letter.",
    "a cat sleeps on the warm windowsill.",
    "ok",
    "ÄÖÜ ß naïve café",
]


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


class Server:
    def __init__(
        self, *arguments: str, api_key: str = "unused", env: dict[str, str] | None = None
    ) -> None:
        self.api_key = api_key  # (what clients send; the server asks for it with --api-key)
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.process = subprocess.Popen(
            [str(PSP_SCRIPT), "serve", "--port", str(self.port), *arguments],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
            preexec_fn=default_sigint,  # (the signals tests send reach it as from a terminal)
        )
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise AssertionError(f"psp serve exited: {self.process.stderr.read()}")
            try:
                if httpx.get(f"{self.url}/health", timeout=1).status_code == 200:
                    return
            except httpx.TransportError:
                time.sleep(0.1)
        raise AssertionError("psp serve did not answer in 60 s")

    def client(self):
        return openai.OpenAI(base_url=f"{self.url}/v1", api_key=self.api_key, max_retries=0)

    def rss_kb(self) -> int:
        status = Path(f"/proc/{self.process.pid}/status").read_text()
        return int(
            next(line for line in status.splitlines() if line.startswith("VmRSS")).split()[1]
        )

    def stop(self) -> str:
        self.process.terminate()
        _, err = self.process.communicate(timeout=30)
        return err


@pytest.fixture()
def two_versions(tmp_path, model):
    """A storage root whose de registry has two versions, the first promoted."""
    registry = ModelRegistry(tmp_path / "storage" / "de" / "psp_model")

    def build(path):
        model.save(path)
        return {}

    first = registry.add_version("a" * 24, build)
    with torch.no_grad():
        model.weight.mul_(-1.5).add_(0.25)
    second = registry.add_version("b" * 24, build)
    registry.promote(first.id, reason="first")
    return tmp_path / "storage", registry, first, second


@pytest.fixture()
def server(two_versions):
    storage = two_versions[0]
    running = Server("--storage-root", str(storage), "--reload-interval", "0.2")
    yield running
    running.stop()


def cosines(got: np.ndarray, want: np.ndarray) -> np.ndarray:
    want = want / np.maximum(np.linalg.norm(want, axis=1, keepdims=True), 1e-12)
    return np.einsum("ij,ij->i", got, want)


@pytest.mark.slow
def test_the_openai_client_gets_the_models_vectors(server, two_versions):
    bundle = two_versions[2].bundle
    client = server.client()
    want = load_model(bundle).embed(SENTENCES)
    for encoding in (None, "float", "base64"):
        # the client's default asks for base64 and decodes it; asked explicitly, it is left as is
        options = {"encoding_format": encoding} if encoding else {}
        response = client.embeddings.create(model="de", input=SENTENCES, **options)
        got = np.array(
            [
                np.frombuffer(base64.b64decode(item.embedding), "<f4")
                if encoding == "base64"
                else item.embedding
                for item in response.data
            ],
            dtype=np.float32,
        )
        assert [item.index for item in response.data] == [0, 1, 2, 3]
        assert cosines(got, want).min() >= 0.9999
        assert np.allclose(np.linalg.norm(got, axis=1), 1, atol=1e-5)
        assert response.usage.prompt_tokens > 0 and response.model == "de"
    single = client.embeddings.create(model="de", input=SENTENCES[0], dimensions=8)
    prefix = load_model(bundle).embed(SENTENCES[:1], dim=8, normalize=True)
    np.testing.assert_allclose(np.array([single.data[0].embedding]), prefix, atol=1e-6)
    models = client.models.list()
    assert [m.id for m in models.data] == ["de"]


@pytest.mark.slow
def test_bad_requests_get_openai_errors_and_the_server_goes_on(server):
    url = f"{server.url}/v1/embeddings"
    before = server.rss_kb()
    cases = [
        ({"model": "de", "input": []}, 400, "empty list"),
        ({"model": "de", "input": ["x"] * 100_000}, 400, "100000 inputs"),
        ({"model": "de", "input": "a" * (1 << 20)}, 400, "characters"),
        ({"model": "de", "input": [101, 2023, 102]}, 400, "token ids"),
        ({"model": "de", "input": [[101, 2023]]}, 400, "token ids"),
        ({"model": "xx", "input": "hello"}, 404, "does not exist"),
        ({"model": "de", "input": 3}, 400, "string or a list of strings"),
        ({"model": "de", "input": ["a", None]}, 400, "string or a list of strings"),
        ({"model": 7, "input": "a"}, 400, "'model' must be a string"),
        ({"model": "de", "input": "a", "dimensions": 0}, 400, "dimensions"),
        ({"model": "de", "input": "a", "encoding_format": "hex"}, 400, "encoding_format"),
        (["not", "an", "object"], 400, "JSON object"),
    ]
    for body, status, fragment in cases:
        response = httpx.post(url, json=body, timeout=60)
        assert response.status_code == status, body if len(str(body)) < 200 else fragment
        error = response.json()["error"]
        assert fragment in error["message"] and error["type"] == "invalid_request_error"
        assert set(error) == {"message", "type", "param", "code"}
    as_json = {"Content-Type": "application/json"}
    not_json = httpx.post(url, content=b"{not json", headers=as_json, timeout=10)
    assert not_json.status_code == 400 and "not valid JSON" in not_json.json()["error"]["message"]
    huge = httpx.post(url, content=b"[" + b"1," * (9 << 20) + b"1]", headers=as_json, timeout=60)
    assert huge.status_code == 413
    unknown = httpx.get(f"{server.url}/v2/nothing", timeout=10)
    assert unknown.status_code == 404 and "error" in unknown.json()
    # still serving, and the refused requests left no memory behind
    ok = server.client().embeddings.create(model="de", input=["still here"])
    assert len(ok.data[0].embedding) == 16
    assert server.rss_kb() - before < 200_000
    with pytest.raises(openai.NotFoundError, match="model_not_found|does not exist"):
        server.client().embeddings.create(model="fr", input=["x"])


@pytest.mark.slow
def test_a_promotion_and_a_rollback_are_swapped_in_under_load_without_a_failed_request(
    two_versions,
):
    """Clients with the server's key, under load: a promotion, then a rollback, each swapped in
    with no failed request and no vector of neither version."""
    storage, registry, first, second = two_versions
    server = Server("--storage-root", str(storage), "--reload-interval", "0.2",
                    "--api-key", "team-key", api_key="team-key")  # fmt: skip
    want = {
        "first": load_model(first.bundle).embed(SENTENCES[:2]),
        "second": load_model(second.bundle).embed(SENTENCES[:2]),
    }
    seen, failures, stop = [], [], threading.Event()

    def client_loop() -> None:
        client = server.client()
        while not stop.is_set():
            try:
                data = client.embeddings.create(model="de", input=SENTENCES[:2]).data
            except Exception as error:  # noqa: BLE001 (every failure counts)
                failures.append(repr(error))
                continue
            got = np.array([item.embedding for item in data])
            names = [
                name for name, vectors in want.items() if cosines(got, vectors).min() >= 0.9999
            ]
            if names:
                seen.append(names[0])
            else:
                failures.append("a vector of neither version")

    def wait_for(name: str, count: int = 1) -> None:
        deadline = time.monotonic() + 20  # (on a loaded machine)
        while time.monotonic() < deadline and seen[-count:] != [name] * count:
            time.sleep(0.1)

    threads = [threading.Thread(target=client_loop) for _ in range(4)]
    for thread in threads:
        thread.start()
    try:
        wait_for("first", 8)
        registry.promote(second.id, reason="swap under load")
        wait_for("second", 8)
        swapped_at = len(seen)
        registry.rollback(reason="rollback under load")
        wait_for("first", 8)
        time.sleep(0.5)
    finally:
        stop.set()
        for thread in threads:
            thread.join()
        log = server.stop()
    assert failures == []
    assert "second" in seen[:swapped_at] and seen[-1] == "first"
    assert "second" not in seen[-8:]
    assert "team-key" not in log  # (keys are never logged)


@pytest.mark.slow
def test_two_worker_processes_share_the_port_and_each_swaps_in_the_promotion(two_versions):
    """psp serve --workers 2: both processes answer (their pids in /health), and after a
    promotion under load every answer is the new version's, with no failed request."""
    storage, registry, first, second = two_versions
    server = Server("--storage-root", str(storage), "--reload-interval", "0.2", "--workers", "2")
    want = {
        "first": load_model(first.bundle).embed(SENTENCES[:2]),
        "second": load_model(second.bundle).embed(SENTENCES[:2]),
    }
    seen, failures, pids, stop = [], [], set(), threading.Event()

    def client_loop() -> None:
        while not stop.is_set():
            try:  # a new connection each time: the kernel picks the process
                pids.add(httpx.get(f"{server.url}/health", timeout=10).json()["pid"])
                data = server.client().embeddings.create(model="de", input=SENTENCES[:2]).data
            except Exception as error:  # noqa: BLE001 (every failure counts)
                failures.append(repr(error))
                continue
            got = np.array([item.embedding for item in data])
            match = [
                name for name, vectors in want.items() if cosines(got, vectors).min() >= 0.9999
            ]
            seen.append(match[0] if match else "neither")

    threads = [threading.Thread(target=client_loop) for _ in range(4)]
    for thread in threads:
        thread.start()
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and (len(pids) < 2 or seen.count("first") < 8):
            time.sleep(0.1)
        registry.promote(second.id, reason="swap under load")
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and seen[-20:] != ["second"] * 20:
            time.sleep(0.1)
        settled = len(seen)
        time.sleep(1.0)
    finally:
        stop.set()
        for thread in threads:
            thread.join()
        server.stop()
    assert failures == [] and "neither" not in seen
    assert len(pids) == 2 and server.process.pid not in pids
    assert "first" in seen and set(seen[settled:]) == {"second"}


@pytest.mark.slow
def test_serve_without_models_is_a_clear_error(tmp_path):
    completed = subprocess.run(
        [str(PSP_SCRIPT), "serve", "--storage-root", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert completed.returncode == 2
    assert f"psp: error: no promoted model under {tmp_path}" in completed.stderr
    bad = subprocess.run(
        [str(PSP_SCRIPT), "serve", "--model", "de"], capture_output=True, text=True, timeout=60
    )
    assert bad.returncode == 2 and "expected NAME=PATH" in bad.stderr


def test_json_error_shape_for_every_route(tmp_path):
    """The error body is OpenAI's even for a method the route does not take (no server)."""
    from starlette.testclient import TestClient

    from psp_core.serving.app import create_app

    class NoModels:
        swaps = 0

        def names(self):
            return []

        def problems(self):
            return {}

        def get(self, name):
            return None

    client = TestClient(create_app(NoModels()))
    response = client.get("/v1/embeddings")
    assert response.status_code == 405
    assert json.loads(response.text)["error"]["type"] == "invalid_request_error"


@pytest.mark.slow
def test_a_killed_worker_is_replaced_and_a_taken_port_is_a_clear_error(two_versions):
    storage = two_versions[0]
    server = Server("--storage-root", str(storage), "--workers", "2")
    try:
        pids = set()
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and len(pids) < 2:
            pids.add(httpx.get(f"{server.url}/health", timeout=10).json()["pid"])
        victim = min(pids)
        subprocess.run(["kill", "-9", str(victim)], check=True)
        after = set()
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and len(after - {victim}) < 2:
            try:
                after.add(httpx.get(f"{server.url}/health", timeout=10).json()["pid"])
            except httpx.TransportError:
                time.sleep(0.1)  # the dead worker's queued connection, reset
        assert victim not in after and len(after) == 2
        response = server.client().embeddings.create(model="de", input=SENTENCES[:1])
        assert len(response.data[0].embedding) == 16
    finally:
        server.stop()

    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        completed = subprocess.run(
            [str(PSP_SCRIPT), "serve", "--storage-root", str(storage), "--port", str(port)]
            + ["--workers", "2"],
            capture_output=True,
            text=True,
            timeout=60,
        )
    assert completed.returncode != 0
    assert f"cannot listen on 127.0.0.1:{port}" in completed.stderr


def test_a_port_outside_1_to_65535_or_taken_is_refused_before_any_banner(tmp_path):
    """No listening on a random port for 99999, no banner before a bind that fails: one line
    and exit 2, before any model is loaded."""
    for bad in ("99999", "0", "-1", "http"):
        completed = subprocess.run(
            [str(PSP_SCRIPT), "serve", "--model", f"de={tmp_path}", "--port", bad],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert completed.returncode == 2, completed.stderr
        assert "argument --port" in completed.stderr and "psp serve (pid" not in completed.stderr
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        completed = subprocess.run(
            [str(PSP_SCRIPT), "serve", "--model", f"de={tmp_path}", "--port", str(port)],
            capture_output=True,
            text=True,
            timeout=60,
        )
    assert completed.returncode == 2
    assert completed.stderr.strip().splitlines() == [
        f"psp: error: cannot listen on 127.0.0.1:{port}: Address already in use"
    ]
