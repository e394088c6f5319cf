"""What answers nobody reads cost ``psp serve``, and how soon a hung worker is replaced.

Unread answers: ``--clients`` connections each send one maximum request (2,048 of the shared STS
sentences, JSON floats) to one server process serving the ``embed_corpus.py`` bundle shape
(vocabulary 20k, dim 1024), and read nothing (a 4 KiB receive buffer); the server's resident
memory is sampled until three send timeouts have passed: the peak above the idle server's, what
is left after (above the idle server's, and above the server's once it answered three such
requests to a client that read them: warmed caches and allocator), and whether each connection was cut
before its answer's end. Then the same again
(a second round must keep nothing more). ``--code DIR`` runs the server from another checkout
(the code before a change; a server without ``--send-timeout`` keeps the connections, which
are closed by the clients at the end of the round).

Hung worker: ``--workers 2 --worker-timeout T``; one worker stopped with SIGSTOP; the seconds
until the supervisor says it replaced it, and whether the next 50 new connections are all
answered.

Arrow's pool: the word cache's split of a request's texts with pyarrow's own pool (mimalloc) and
with malloc, which the server chooses (its freed memory can be given back).

Prints one JSON object on stdout; logs go to stderr.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import _common
import embed_corpus

log = _common.log


def server_command(*arguments: str) -> list[str]:
    return [sys.executable, "-m", "psp_core.cli", "serve", *arguments]


def start(code: Path, bundle: Path, *arguments: str) -> tuple[subprocess.Popen, int, Path]:
    import httpx

    port = _free_port()
    errors = Path(os.environ.get("TMPDIR", "/tmp")) / f"serve-memory-{port}.log"
    environment = {k: v for k, v in os.environ.items() if k != "PSP_API_KEY"}
    environment["PYTHONPATH"] = str(code)
    process = subprocess.Popen(
        server_command("--model", f"de={bundle}", "--port", str(port), *arguments),
        cwd=code,
        stdout=subprocess.DEVNULL,
        stderr=errors.open("w"),
        env=environment,
    )
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise SystemExit(f"psp serve exited: {errors.read_text()[-2000:]}")
        try:
            if httpx.get(f"http://127.0.0.1:{port}/health", timeout=1).status_code == 200:
                return process, port, errors
        except httpx.TransportError:
            time.sleep(0.2)
    raise SystemExit("psp serve did not answer in 120 s")


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def rss_mb(pid: int) -> float:
    status = Path(f"/proc/{pid}/status").read_text()
    line = next(x for x in status.splitlines() if x.startswith("VmRSS"))
    return int(line.split()[1]) / 1024


def _cut_short(sock: socket.socket, wait: float) -> bool:
    """Whether the connection ended before the end of its answer (what was sent is read; the
    server has given up by now, if it does)."""
    sock.settimeout(wait)
    received = bytearray()
    try:
        while chunk := sock.recv(1 << 20):
            received += chunk
    except ConnectionResetError:
        return True
    except TimeoutError:
        return False
    return not received.endswith(b"}\r\n0\r\n\r\n") and not received.endswith(b"}")


def unread_rounds(args, code: Path, bundle: Path, sentences: list[str]) -> dict:
    help_text = subprocess.run(
        server_command("--help"),
        cwd=code,
        env={**os.environ, "PYTHONPATH": str(code)},
        capture_output=True,
        text=True,
    ).stdout
    flags = ["--send-timeout", str(args.send_timeout)] if "--send-timeout" in help_text else []
    process, port, _ = start(code, bundle, *flags)
    body = json.dumps({"model": "de", "input": sentences[: args.inputs]}).encode()
    request = (
        b"POST /v1/embeddings HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        + b"Content-Length: %d\r\n\r\n" % len(body)
        + body
    )
    try:
        idle = rss_mb(process.pid)
        warm = _memory_once_warm(port, body, process.pid, 1.2 if args.quick else 2.0)
        rounds = []
        for _ in range(args.rounds):
            clients = []
            for _ in range(args.clients):
                sock = socket.create_connection(("127.0.0.1", port), timeout=30)
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
                sock.sendall(request)
                clients.append(sock)
            peak, started = 0.0, time.monotonic()
            while time.monotonic() - started < (2 if args.quick else 3 * args.send_timeout + 2):
                peak = max(peak, rss_mb(process.pid))
                time.sleep(0.1)
            held = rss_mb(process.pid)
            wait = 0.2 if args.quick else 1.0
            cut = sum(_cut_short(sock, wait) for sock in clients) if flags else 0
            for sock in clients:
                sock.close()
            time.sleep(0.5 if args.quick else 2 * args.send_timeout)
            rounds.append(
                {
                    "peak_mb_above_idle": round(peak - idle),
                    "mb_above_idle_after_3_timeouts": round(held - idle),
                    "mb_above_warm_after_3_timeouts": round(held - warm),
                    "mb_above_idle_after_clients_closed": round(rss_mb(process.pid) - idle),
                    "connections_cut_by_the_server": cut,
                }
            )
            log.info("unread round: %s", rounds[-1])
        return {
            "send_timeout_flag": bool(flags),
            "idle_mb": round(idle),
            "warm_mb": round(warm),
            "rounds": rounds,
        }
    finally:
        process.terminate()
        process.wait(60)


def _memory_once_warm(port: int, body: bytes, pid: int, settle: float) -> float:
    """The server's memory (MB) once it has answered a maximum request three times to a client
    that read it all, ``settle`` seconds after (its allocator asked to give back): its word
    cache (which keeps a word seen again) and allocator warmed, what served requests leave."""
    import httpx

    headers = {"Content-Type": "application/json"}
    for _ in range(3):
        url = f"http://127.0.0.1:{port}/v1/embeddings"
        httpx.post(url, content=body, headers=headers, timeout=120).raise_for_status()
    time.sleep(settle)
    return rss_mb(pid)


def hung_worker(args, bundle: Path) -> dict:
    import httpx

    timeout = args.worker_timeout
    process, port, errors = start(
        _common.REPO_ROOT, bundle, "--workers", "2", "--worker-timeout", str(timeout)
    )
    try:
        pids = set()
        while len(pids) < 2:
            pids.add(httpx.get(f"http://127.0.0.1:{port}/health", timeout=10).json()["pid"])
        stopped = min(pids)
        os.kill(stopped, signal.SIGSTOP)
        started = time.monotonic()
        while "did not answer" not in errors.read_text() and time.monotonic() - started < 120:
            time.sleep(0.05)
        replaced_after = time.monotonic() - started
        answered = 0
        for _ in range(50):
            try:
                answered += httpx.get(f"http://127.0.0.1:{port}/health", timeout=5).is_success
            except httpx.TransportError:
                pass
        return {
            "worker_timeout_s": timeout,
            "replaced_after_s": round(replaced_after, 2),
            "new_connections_answered_of_50": answered,
        }
    finally:
        process.terminate()
        process.wait(60)


SPLIT_TIMING = """
import json, sys, time
from psp_core.tokenization.word_piece_cache import _split_words
sentences, seconds = json.load(sys.stdin), float(sys.argv[1])
for _ in range(20):
    _split_words(sentences)
rates = []
for _ in range(5):
    started, done = time.perf_counter(), 0
    while time.perf_counter() - started < seconds:
        _split_words(sentences)
        done += len(sentences)
    rates.append(done / (time.perf_counter() - started))
print(sorted(rates)[2])
"""


def split_by_pool(sentences: list[str], seconds: float, sizes=(64, 2048)) -> dict:
    """What the server's choice of pyarrow pool costs the word cache's split of a request's texts
    (batches of each of ``sizes`` sentences, each pool in a fresh process; median of 5
    timings)."""
    rates = {}
    for pool in ("mimalloc", "system"):
        for size in sizes:
            done = subprocess.run(
                [sys.executable, "-c", SPLIT_TIMING, str(seconds)],
                input=json.dumps(sentences[:size]),
                env={**os.environ, "ARROW_DEFAULT_MEMORY_POOL": pool},
                cwd=_common.REPO_ROOT,
                capture_output=True,
                text=True,
                check=True,
            )
            rates[f"{pool}_batch{size}_sentences_per_second"] = round(float(done.stdout))
    return rates


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    _common.add_data_arguments(parser)
    parser.add_argument("--clients", type=int, default=12)
    parser.add_argument("--inputs", type=int, default=2048, help="inputs of each request")
    parser.add_argument("--send-timeout", type=float, default=5.0)
    parser.add_argument("--worker-timeout", type=float, default=5.0)
    parser.add_argument("--rounds", type=int, default=2, help="of the unread clients")
    parser.add_argument(
        "--code", type=Path, default=_common.REPO_ROOT, help="the checkout whose server to run"
    )
    _common.add_quick_argument(
        parser,
        "embed_corpus.py's quick bundle, 3 clients of 300 inputs, one round, short timeouts, "
        "the word split timed on batches of 64",
    )
    args = parser.parse_args(argv)
    if args.quick:
        args.clients, args.inputs, args.rounds = 3, 300, 1
        args.send_timeout, args.worker_timeout = 1.0, 1.0
    _common.setup_logging()
    logging.getLogger("httpx").setLevel(logging.WARNING)
    if _common.require_data(args.data_dir, "bitext", "en-de") is None:
        return
    bundle = embed_corpus.bundle_for(args, 20_000, 1024)
    sentences, _ = _common.read_sts_sentences(args.data_dir)
    _common.emit(
        {
            "benchmark": "serve_memory",
            "code": str(args.code.resolve()),
            "model": str(bundle),
            "clients": args.clients,
            "inputs_per_request": args.inputs,
            "machine": _common.machine_info(),
            "unread_answers": unread_rounds(args, args.code.resolve(), bundle, sentences),
            "hung_worker": hung_worker(args, bundle),
            "word_split_by_arrow_pool": (
                split_by_pool(sentences, 0.02, sizes=(64,))
                if args.quick
                else split_by_pool(sentences, 1.0)
            ),
            "loadavg_at_end": _common.loadavg(),
        }
    )


if __name__ == "__main__":
    main()
