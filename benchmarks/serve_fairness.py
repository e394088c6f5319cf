"""``psp serve`` fairness: what a maximum-size request in flight adds to the latency of a
one-sentence request.

The server: ``psp serve`` (``--workers``, 1 by default: the process that takes both requests is
the one that must be fair; an API key on) of the ``embed_corpus.py`` bundle shape (vocabulary
20k, dim 1024), as in ``serve_load.py``. First the one-sentence requests alone (``--probes`` of
them, one after the other, a pause between two), then the same while another process sends
maximum-size requests back to back: 2,048 texts of 700 distinct made-up words each (no word
seen twice, so no cache helps), base64 answers. Added latency = each probe's latency under the
large requests minus the median alone; the goal is a maximum under 200 ms.

Prints one JSON object on stdout; logs go to stderr.
"""

from __future__ import annotations

import argparse
import http.client
import json
import multiprocessing
import os
import random
import subprocess
import sys
import time
from pathlib import Path

import _common
import embed_corpus
import serve_load

log = _common.log
PSP = Path(sys.executable).with_name("psp")
KEY = "benchmark-key"
GOAL_MS = 200


def large_body(texts: int, words: int, seed: int) -> bytes:
    """``texts`` texts of ``words`` made-up words each, no word used twice (a few letters and
    a count in base 36: 2,048 texts of 700 words stay under the 16 MiB body limit)."""
    rng = random.Random(seed)
    letters = "abcdefghijklmnopqrstuvwxyz"
    counter = iter(range(texts * words))
    inputs = [
        " ".join(
            "".join(rng.choice(letters) for _ in range(rng.randint(2, 5))) + base36(next(counter))
            for _ in range(words)
        )
        for _ in range(texts)
    ]
    return json.dumps({"model": "de", "input": inputs, "encoding_format": "base64"}).encode()


def base36(number: int) -> str:
    digits = "0123456789abcdefghijklmnopqrstuvwxyz"
    text = ""
    while True:
        number, digit = divmod(number, 36)
        text = digits[digit] + text
        if not number:
            return text


def post(connection: http.client.HTTPConnection, body: bytes) -> int:
    headers = {"Content-Type": "application/json", "Authorization": f"Bearer {KEY}"}
    connection.request("POST", "/v1/embeddings", body=body, headers=headers)
    response = connection.getresponse()
    response.read()
    return response.status


def send_large(port: int, body: bytes, stop, sent) -> None:
    """A process of its own (its reading of the answers takes no GIL from the probes)."""
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
    while not stop.is_set():
        started = time.perf_counter()
        status = post(connection, body)
        sent.put((status, time.perf_counter() - started))


def probe(port: int, count: int, pause: float) -> tuple[list[float], list[int]]:
    """Latencies (s) of ``count`` one-sentence requests, one after the other."""
    body = json.dumps({"model": "de", "input": "a one-sentence request."}).encode()
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
    latencies, statuses = [], []
    for _ in range(count):
        started = time.perf_counter()
        statuses.append(post(connection, body))
        latencies.append(time.perf_counter() - started)
        time.sleep(pause)
    return latencies, statuses


def summary(latencies: list[float]) -> dict:
    ordered = sorted(latencies)
    return {
        "count": len(ordered),
        "p50_ms": round(1000 * ordered[len(ordered) // 2], 2),
        "p99_ms": round(1000 * ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))], 2),
        "max_ms": round(1000 * ordered[-1], 2),
    }


def measure(port: int, body: bytes, probes: int, pause: float) -> dict:
    alone, statuses = probe(port, probes, pause)
    context = multiprocessing.get_context("spawn")
    stop, sent = context.Event(), context.Queue()
    sender = context.Process(target=send_large, args=(port, body, stop, sent), daemon=True)
    sender.start()
    time.sleep(1.0)  # the first large request is in flight
    beside, beside_statuses = probe(port, probes, pause)
    stop.set()
    sender.join(600)
    if any(status != 200 for status in statuses + beside_statuses):
        raise SystemExit(f"a probe failed: {sorted(set(statuses + beside_statuses))}")
    large = []
    while not sent.empty():
        large.append(sent.get())
    if not large or any(status != 200 for status, _ in large):
        raise SystemExit(f"the large requests were not answered: {sorted({s for s, _ in large})}")
    baseline = sorted(alone)[len(alone) // 2]
    added = [latency - baseline for latency in beside]
    return {
        "alone": summary(alone),
        "beside_large": summary(beside),
        "added_ms": {
            "p50": round(1000 * sorted(added)[len(added) // 2], 2),
            "p99": round(1000 * sorted(added)[min(len(added) - 1, int(len(added) * 0.99))], 2),
            "max": round(1000 * max(added), 2),
        },
        "large_requests": {
            "answered": len(large),
            "statuses": sorted({status for status, _ in large}),
            "mean_s": round(sum(s for _, s in large) / len(large), 3) if large else None,
        },
        "probe_failures": sum(status != 200 for status in statuses + beside_statuses),
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    _common.add_data_arguments(parser)
    parser.add_argument("--workers", type=int, default=1, help="psp serve --workers")
    parser.add_argument("--probes", type=int, default=200)
    parser.add_argument("--pause", type=float, default=0.02, help="seconds between two probes")
    parser.add_argument("--texts", type=int, default=2048, help="texts of the large request")
    parser.add_argument("--words", type=int, default=700, help="words of each of its texts")
    parser.add_argument("--no-key", action="store_true", help="a server without API keys")
    _common.add_quick_argument(
        parser, "embed_corpus.py's quick bundle, 20 probes, a large request of 64 x 50 words"
    )
    args = parser.parse_args(argv)
    if args.quick:
        args.probes, args.texts, args.words = 20, 64, 50
    _common.setup_logging()
    if _common.require_data(args.data_dir, "bitext", "en-de") is None:
        return
    bundle = embed_corpus.bundle_for(args, 20_000, 1024)
    storage, _ = serve_load.registry_of_two(bundle, args.results_dir)
    body = large_body(args.texts, args.words, seed=7)
    log.info("large request: %d texts, %.1f MB", args.texts, len(body) / 1e6)
    port = serve_load.free_port()
    environment = dict(os.environ)
    environment.pop("PSP_API_KEY", None)
    if not args.no_key:
        environment["PSP_API_KEY"] = KEY
    server = subprocess.Popen(
        [str(PSP), "serve", "--storage-root", str(storage), "--port", str(port)]
        + ["--workers", str(args.workers)],
        stderr=subprocess.PIPE,
        text=True,
        env=environment,
    )
    try:
        serve_load._wait_ready(port, server)
        figures = measure(port, body, args.probes, args.pause)
    finally:
        server.terminate()
        server.communicate(timeout=60)
    log.info("%s", figures)
    _common.emit(
        {
            "benchmark": "serve_fairness",
            "workers": args.workers,
            "api_key": not args.no_key,
            "model": str(bundle),
            "large_request": {"texts": args.texts, "words": args.words, "bytes": len(body)},
            "machine": _common.machine_info(),
            "loadavg_at_end": _common.loadavg(),
            **figures,
            "goal": {"max_added_ms": GOAL_MS, "met": figures["added_ms"]["max"] <= GOAL_MS},
        }
    )


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    main()
