"""``psp serve`` under load, from 127.0.0.1: requests/s, sentences/s and p50/p99 latency with 1, 8
and 64 concurrent clients, batches of 1 and of 64 sentences, JSON floats and base64; then the same
while a promotion swaps the model, once in a cell and every second (no failed request allowed).

The server: ``psp serve`` in its own process (1 tokenizer thread), serving a registry of two
versions of the ``embed_corpus.py`` bundle shape (vocabulary 20k, dim 1024), with an API key
that every request bears (``--no-key``: none). The clients: one
process of asyncio connections with keep-alive (answers read by counting bytes), each sending its
next request when the previous answer is read (a closed loop), each request prebuilt; the
sentences are the shared STS sentences (repeated: a server's queries), batches drawn in turn.
Client and server share this machine's cores, so the figures are a floor.

Prints one JSON object on stdout; logs go to stderr.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import _common
import embed_corpus

log = _common.log
PSP = Path(sys.executable).with_name("psp")
GOALS = {"single_requests_per_second": 1500, "batch64_base64_sentences_per_second": 20000}
KEY = "benchmark-key"


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def registry_of_two(bundle: Path, results: Path) -> tuple[Path, list[str]]:
    """A registry folder whose two versions are the bundle and its negation."""
    import numpy as np

    from psp_core.models.bundle import load_bundle, save_bundle
    from psp_core.models.registry import ModelRegistry

    root = results / "serve-storage"
    registry = ModelRegistry(root / "de" / "psp_model")
    if len(registry.versions()) < 2:
        config, proto, table = load_bundle(bundle)
        for sign, fingerprint in ((1.0, "a" * 24), (-1.0, "b" * 24)):
            registry.add_version(
                fingerprint,
                lambda path, s=sign: (save_bundle(path, s * np.asarray(table), proto, config), {})[
                    1
                ],
            )
    ids = [v.id for v in registry.versions()[-2:]]
    registry.promote(ids[0], reason="benchmark start")
    return root, ids


def request_bytes(port: int, texts: list[str], encoding: str, key: str | None = KEY) -> bytes:
    body = json.dumps({"model": "de", "input": texts, "encoding_format": encoding}).encode()
    head = (
        f"POST /v1/embeddings HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n"
        + (f"Authorization: Bearer {key}\r\n" if key else "")
        + f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
    )
    return head.encode() + body


def prebuilt(
    port: int, sentences: list[str], batch: int, encoding: str, key: str | None = KEY
) -> list[bytes]:
    """Up to 512 requests of ``batch`` sentences each, in the order of ``sentences``."""
    return [
        request_bytes(port, sentences[i : i + batch], encoding, key)
        for i in range(0, min(len(sentences), 512 * batch), batch)
    ]


class _Answers(asyncio.Protocol):
    """Reads HTTP answers on one keep-alive connection by counting bytes (the status line and
    Content-Length parsed, the body not copied): a client that costs the shared cores as little
    as possible, so the figures are the server's."""

    def __init__(self) -> None:
        self.head = b""
        self.remaining: int | None = None
        self.status = b""
        self.done: asyncio.Future | None = None

    def expect(self) -> asyncio.Future:
        self.done = asyncio.get_running_loop().create_future()
        return self.done

    def data_received(self, data: bytes) -> None:
        if self.remaining is None:
            self.head += data
            end = self.head.find(b"\r\n\r\n")
            if end < 0:
                return
            head, body = self.head[:end], self.head[end + 4 :]
            self.head = b""
            self.status = head.split(b"\r\n", 1)[0]
            length = next(
                int(line.split(b":")[1])
                for line in head.split(b"\r\n")
                if line.lower().startswith(b"content-length:")
            )
            self.remaining = length - len(body)
        else:
            self.remaining -= len(data)
        if self.remaining <= 0 and self.done is not None and not self.done.done():
            self.remaining = None
            self.done.set_result(self.status)


async def client(port: int, requests: list[bytes], until: float, latencies: list, errors: list):
    loop = asyncio.get_running_loop()
    transport, answers = await loop.create_connection(_Answers, "127.0.0.1", port)
    index = 0
    try:
        while time.perf_counter() < until:
            payload = requests[index % len(requests)]
            index += 1
            started = time.perf_counter()
            answered = answers.expect()
            transport.write(payload)
            status_line = await answered
            if b" 200 " not in status_line:
                errors.append(status_line.decode(errors="replace").strip())
            latencies.append(time.perf_counter() - started)
    finally:
        transport.close()


def drive(port: int, requests: list[bytes], clients: int, seconds: float) -> dict:
    latencies: list[float] = []
    errors: list[str] = []

    async def main() -> None:
        until = time.perf_counter() + seconds
        await asyncio.gather(
            *(
                client(port, requests[i:] + requests[:i], until, latencies, errors)
                for i in range(clients)
            )
        )

    started = time.perf_counter()
    asyncio.run(main())
    elapsed = time.perf_counter() - started
    latencies.sort()
    return {
        "requests": len(latencies),
        "requests_per_second": round(len(latencies) / elapsed, 1),
        "p50_ms": round(1000 * latencies[len(latencies) // 2], 2) if latencies else None,
        "p99_ms": round(1000 * latencies[int(len(latencies) * 0.99)], 2) if latencies else None,
        "failed": len(errors),
        "first_failure": errors[0] if errors else None,
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    _common.add_data_arguments(parser)
    parser.add_argument("--seconds", type=float, default=8.0, help="per measurement")
    parser.add_argument("--clients", default="1,8,64")
    parser.add_argument("--workers", type=int, default=1, help="psp serve --workers")
    parser.add_argument(
        "--settle", type=float, default=1.5, help="seconds after a swapping cell (its last load)"
    )
    parser.add_argument("--no-key", action="store_true", help="a server without API keys")
    _common.add_quick_argument(
        parser,
        "embed_corpus.py's quick bundle, 0.3 s per cell, 8 clients, 1,000 STS sentences",
    )
    args = parser.parse_args(argv)
    if args.quick:
        args.seconds, args.clients, args.settle = 0.3, "8", 0.2
    _common.setup_logging()
    if _common.require_data(args.data_dir, "bitext", "en-de") is None:
        return
    bundle = embed_corpus.bundle_for(args, 20_000, 1024)
    storage, versions = registry_of_two(bundle, args.results_dir)
    sentences, _ = _common.read_sts_sentences(args.data_dir)
    sentences = sentences[:1000] if args.quick else sentences
    port = free_port()
    key = None if args.no_key else KEY
    environment = {k: v for k, v in os.environ.items() if k != "PSP_API_KEY"}
    if key:
        environment["PSP_API_KEY"] = key
    server = subprocess.Popen(
        [str(PSP), "serve", "--storage-root", str(storage), "--port", str(port)]
        + ["--reload-interval", "0.5", "--workers", str(args.workers)],
        stderr=subprocess.PIPE,
        text=True,
        env=environment,
    )
    try:
        _wait_ready(port, server)
        results = {}
        for batch in (1, 64):
            for encoding in ("float", "base64"):
                requests = prebuilt(port, sentences, batch, encoding, key)
                for clients in map(int, args.clients.split(",")):
                    name = f"batch{batch}_{encoding}_clients{clients}"
                    figures = drive(port, requests, clients, args.seconds)
                    figures["sentences_per_second"] = round(figures["requests_per_second"] * batch)
                    results[name] = figures
                    log.info("%s: %s", name, figures)
        swapping = _while_swapping(
            port, storage, versions, sentences, args.seconds, args.settle, key
        )
        results.update(swapping)
    finally:
        server.terminate()
        server.communicate(timeout=30)
    single = max(v["requests_per_second"] for k, v in results.items() if k.startswith("batch1_"))
    batched = max(
        v["sentences_per_second"] for k, v in results.items() if k.startswith("batch64_base64")
    )
    p99_at_8 = {
        k: v["p99_ms"] for k, v in results.items() if k.endswith("clients8") and "swapping" not in k
    }
    _common.emit(
        {
            "benchmark": "serve_load",
            "workers": args.workers,
            "api_key": key is not None,
            "model": str(bundle),
            "machine": _common.machine_info(),
            "loadavg_at_end": _common.loadavg(),
            "results": results,
            "goals": {
                "single_requests_per_second": single,
                "single_at_least_1500": single >= GOALS["single_requests_per_second"],
                "batch64_base64_sentences_per_second": batched,
                "batch64_at_least_20000": batched >= GOALS["batch64_base64_sentences_per_second"],
                "p99_ms_at_8_clients": p99_at_8,
                "p99_under_50ms_at_8": {k: v < 50 for k, v in p99_at_8.items()},
                "no_failed_request_while_swapping": all(
                    v["failed"] == 0 for k, v in results.items() if k.startswith("swapping")
                ),
            },
        }
    )


def _while_swapping(port, storage, versions, sentences, seconds, settle, key) -> dict:
    """Each cell twice: one promotion in the middle of the cell (a retrain promoted while the
    server is busy), and a promotion every second (a stress: each swap loads the other version,
    80 MB, beside the served one, on the same 2 cores; cells under 3 s swap 3 times). After a
    cell, ``settle`` seconds let the last swap's load end."""
    from psp_core.models.registry import ModelRegistry

    registry = ModelRegistry(storage / "de" / "psp_model")
    swaps = []
    turn = [1]

    def swapper(stop: threading.Event, every: float, times: int) -> None:
        for _ in range(times):
            if stop.wait(every):
                return
            registry.promote(versions[turn[0]], reason="benchmark swap")
            swaps.append(versions[turn[0]])
            turn[0] = 1 - turn[0]

    results = {}
    often = min(1.0, seconds / 3)
    for label, every, times in (
        ("once", seconds / 2, 1),
        ("every_second", often, int(seconds / often)),
    ):
        for batch, clients in ((1, 8), (64, 8)):
            requests = prebuilt(port, sentences, batch, "base64", key)
            stop = threading.Event()
            thread = threading.Thread(target=swapper, args=(stop, every, times))
            thread.start()
            try:
                figures = drive(port, requests, clients, seconds)
            finally:
                stop.set()
                thread.join()
            time.sleep(settle)  # the last swap's load ends before the next cell
            figures["sentences_per_second"] = round(figures["requests_per_second"] * batch)
            results[f"swapping_{label}_batch{batch}_base64_clients{clients}"] = figures
            log.info("swapping %s, batch %d: %s", label, batch, figures)
    results["swapping_promotions"] = {"count": len(swaps), "failed": 0}
    return results


def _wait_ready(port: int, server: subprocess.Popen) -> None:
    import urllib.request

    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        if server.poll() is not None:
            raise SystemExit(f"psp serve exited: {server.stderr.read()}")
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=1)
            return
        except OSError:
            time.sleep(0.2)
    raise SystemExit("psp serve did not answer in 120 s")


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    main()
