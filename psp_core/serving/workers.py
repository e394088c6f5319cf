"""``psp serve --workers N``: N server processes on one port, each with a socket of its own
(``SO_REUSEPORT``: the kernel hands each new connection to one of them), its own copy of the
models and its own watcher of the promoted versions; a worker that dies is replaced.

One process answers requests one Python thread at a time: tokenizing and writing the answer
hold the GIL, so a second core helps little. On the 2-core test machine, at 8 clients, two
workers served 2.2x the batches of 64 as JSON floats and 1.9x as base64 of one, and the floats'
p99 fell from 60 to 34 ms (benchmarks/README.md, serve_load.py); each worker costs the models'
memory once more.

The settings reach the worker processes (started by ``spawn``) through one environment
variable, :data:`SETTINGS_ENV`, read by :func:`app_from_environment`, the app factory uvicorn
runs in each.
"""

from __future__ import annotations

import json
import logging
import multiprocessing
import os
import signal
import socket
import sys
import threading
from contextlib import asynccontextmanager
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from psp_core.serving.limits import Limits

log = logging.getLogger(__name__)

SETTINGS_ENV = "PSP_SERVE_SETTINGS"
FACTORY = "psp_core.serving.workers:app_from_environment"


@dataclass(frozen=True)
class ServeSettings:
    folders: dict[str, str]
    threads: int = 1
    reload_interval: float = 2.0
    max_inputs: int = Limits.max_inputs
    max_input_chars: int = Limits.max_input_chars

    def limits(self) -> Limits:
        return Limits(max_inputs=self.max_inputs, max_input_chars=self.max_input_chars)

    def models(self):
        from psp_core.serving.models import ModelSet

        return ModelSet(
            {name: Path(path) for name, path in self.folders.items()}, num_threads=self.threads
        )


def app_from_environment():
    """The app of one worker process: its models, watched for promotions until it stops."""
    from psp_core.serving.app import create_app

    settings = ServeSettings(**json.loads(os.environ[SETTINGS_ENV]))
    models = settings.models()

    @asynccontextmanager
    async def lifespan(app):
        models.watch(settings.reload_interval)
        if _ready is not None:
            _ready.send(True)  # models loaded: the supervisor replaces this worker if it dies
        try:
            yield
        finally:
            models.stop()

    return create_app(models, settings.limits(), lifespan=lifespan)


def run_workers(settings: ServeSettings, host: str, port: int, workers: int) -> None:
    """Serve with ``workers`` processes until SIGINT or SIGTERM; a worker that dies is replaced.

    Each worker listens on a socket of its own with ``SO_REUSEPORT``, so the kernel spreads new
    connections evenly over the processes. (uvicorn's own ``--workers`` shares one socket: the
    first process to wake took a burst of keep-alive connections and kept them; with 8 clients
    two workers served 244 batches/s where two separate ports served 487.)
    """
    _check_port_free(host, port)
    context = multiprocessing.get_context("spawn")
    payload = json.dumps(asdict(settings))

    stopping = threading.Event()
    previous = {
        sig: signal.signal(sig, lambda *_: stopping.set())
        for sig in (signal.SIGINT, signal.SIGTERM)
    }
    running = [_Worker.start(context, payload, host, port) for _ in range(workers)]
    try:
        while not stopping.wait(0.5):
            for index, worker in enumerate(running):
                if worker.process.is_alive():
                    continue
                if not worker.served():  # it never served: the next one would fail the same way
                    raise RuntimeError(
                        f"psp serve worker {worker.process.pid} exited "
                        f"({worker.process.exitcode}) before it served: see its error above"
                    )
                log.warning(
                    "psp serve worker %s exited (%s): replaced",
                    worker.process.pid,
                    worker.process.exitcode,
                )
                running[index] = _Worker.start(context, payload, host, port)
    finally:
        for worker in running:
            worker.process.terminate()  # uvicorn's graceful shutdown: requests in flight end
        for worker in running:
            worker.process.join(30)
            if worker.process.is_alive():
                worker.process.kill()
        for sig, handler in previous.items():
            signal.signal(sig, handler)


@dataclass
class _Worker:
    """A worker process and the pipe on which it says, once, that it serves."""

    process: Any
    reader: Any
    ready: bool = False

    @classmethod
    def start(cls, context, payload: str, host: str, port: int) -> _Worker:
        reader, writer = context.Pipe(duplex=False)
        process = context.Process(target=_worker, args=(payload, host, port, writer), daemon=True)
        process.start()
        writer.close()  # the child's copy is the one that writes
        return cls(process, reader)

    def served(self) -> bool:
        if not self.ready and self.reader.poll():
            self.ready = True
        return self.ready


def _listening_socket(host: str, port: int) -> socket.socket:
    family, kind, proto, _, address = socket.getaddrinfo(
        host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
    )[0]
    sock = socket.socket(family, kind, proto)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    sock.bind(address)
    return sock


def _check_port_free(host: str, port: int) -> None:
    """A clear error now if another program holds the port (each worker would fail to bind)."""
    family, kind, proto, _, address = socket.getaddrinfo(
        host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
    )[0]
    with socket.socket(family, kind, proto) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind(address)
        except OSError as error:
            raise ValueError(f"cannot listen on {host}:{port}: {error.strerror}") from error


_ready = None  # in a worker process: the pipe its app writes to once serving


def _worker(payload: str, host: str, port: int, ready) -> None:
    """One worker process: its own socket on the shared port, uvicorn serving the app."""
    import uvicorn

    global _ready
    _ready = ready
    os.environ[SETTINGS_ENV] = payload
    sock = _listening_socket(host, port)
    config = uvicorn.Config(
        FACTORY, factory=True, log_level="warning", access_log=False, lifespan="on"
    )
    # uvicorn shuts down gracefully on SIGTERM, then raises it again under the handler found
    # at its start: this one ends the process normally (its multiprocessing semaphores
    # released, not reported leaked by the resource tracker)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    uvicorn.Server(config).run(sockets=[sock])
