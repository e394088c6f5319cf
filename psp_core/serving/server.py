"""Running ``psp serve``: one process (the default), or ``--workers N`` processes on one port.

Each process builds the same app (:func:`serving_app`): its own copy of the models, watched for
promotions from the app's start to its end. With ``--workers N`` every worker listens on a
socket of its own with ``SO_REUSEPORT``, so the kernel spreads new connections over them; a
worker that dies is replaced, one that dies before it ever served stops the server with its
error.

One process answers requests one Python thread at a time: tokenizing and writing the answer
hold the GIL, so a second core helps little, where a second worker process serves more
batches and lowers the tail latency (benchmarks/RESULTS.md#serve-load); each worker costs the
models' memory once more. (uvicorn's own ``workers`` shares one socket: the process that wakes
first takes a burst of keep-alive connections and keeps them, so separate sockets serve more.)
"""

from __future__ import annotations

import logging
import multiprocessing
import os
import signal
import socket
import sys
import threading
from collections.abc import Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from psp_core.serving.limits import Limits

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ServeSettings:
    """What ``psp serve`` was asked for (picklable: it is what a worker process receives)."""

    folders: dict[str, Path]
    host: str = "127.0.0.1"
    port: int = 8000
    threads: int = 1
    reload_interval: float = 2.0
    limits: Limits = Limits()
    #: the keys a request must bear (``Authorization: Bearer KEY``); none: no key asked
    api_keys: tuple[str, ...] = field(default=(), repr=False)
    #: origins whose browser pages may call the API (CORS); none: no CORS headers
    cors_origins: tuple[str, ...] = ()


def serving_app(settings: ServeSettings, on_serving: Callable[[], None] | None = None):
    """The app of one process: its models loaded now, watched for promotions while it serves;
    ``on_serving`` is called once it serves."""
    import torch

    from psp_core.serving.app import create_app
    from psp_core.serving.models import ModelSet

    # one averaging thread: the worker processes are the parallelism, and torch's pool of
    # threads, woken once per piece of a large request, would spin on the cores the other
    # requests need (benchmarks/RESULTS.md#serve-fairness)
    torch.set_num_threads(1)
    models = ModelSet(settings.folders, num_threads=settings.threads)

    @asynccontextmanager
    async def lifespan(app):
        models.watch(settings.reload_interval)
        served = ", ".join(f"{n} ({models.get(n).version})" for n in models.names())
        keys = f"{len(settings.api_keys)} API key(s)" if settings.api_keys else "no API key"
        print(
            f"psp serve (pid {os.getpid()}): {served} on http://{settings.host}:{settings.port}/v1"
            f" ({keys})",
            file=sys.stderr,
            flush=True,
        )
        if on_serving is not None:
            on_serving()
        try:
            yield
        finally:
            models.stop()

    return create_app(
        models,
        settings.limits,
        lifespan=lifespan,
        api_keys=settings.api_keys,
        cors_origins=settings.cors_origins,
    )


def uvicorn_config(app, settings: ServeSettings, **options):
    """uvicorn's configuration for ``app``: the protocol that enforces the connection limits
    (:mod:`psp_core.serving.connections`), no access log, no WebSockets."""
    import uvicorn

    from psp_core.serving.connections import ensure_file_limit, guarded_protocol

    ensure_file_limit(settings.limits.max_connections)
    return uvicorn.Config(
        app,
        http=guarded_protocol(settings.limits),
        ws="none",
        timeout_keep_alive=settings.limits.keep_alive_timeout,
        log_level="warning",
        access_log=False,
        **options,
    )


def serve(settings: ServeSettings, workers: int = 1) -> None:
    """Serve until SIGINT or SIGTERM (uvicorn's graceful shutdown: requests in flight end)."""
    if workers > 1:
        _run_workers(settings, workers)
        return
    import uvicorn

    config = uvicorn_config(serving_app(settings), settings, host=settings.host, port=settings.port)
    server = uvicorn.Server(config)
    server.run()
    if not server.started:  # (as uvicorn.run ends: the app's start failed, its error logged)
        sys.exit(3)


def _run_workers(settings: ServeSettings, workers: int) -> None:
    check_port_free(settings.host, settings.port)
    context = multiprocessing.get_context("spawn")
    stopping = threading.Event()
    previous = {
        sig: signal.signal(sig, lambda *_: stopping.set())
        for sig in (signal.SIGINT, signal.SIGTERM)
    }
    running = [_Worker.start(context, settings) for _ in range(workers)]
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
                running[index] = _Worker.start(context, settings)
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
    def start(cls, context, settings: ServeSettings) -> _Worker:
        reader, writer = context.Pipe(duplex=False)
        process = context.Process(target=_worker, args=(settings, writer), daemon=True)
        process.start()
        writer.close()  # the child's copy is the one that writes
        return cls(process, reader)

    def served(self) -> bool:
        if not self.ready and self.reader.poll():
            self.ready = True
        return self.ready


def _worker(settings: ServeSettings, ready) -> None:
    """One worker process: its own socket on the shared port, uvicorn serving the app."""
    import uvicorn

    sock = _socket(settings.host, settings.port, reuse_port=True)
    app = serving_app(settings, on_serving=lambda: ready.send(True))
    config = uvicorn_config(app, settings, lifespan="on")
    # uvicorn shuts down gracefully on SIGTERM, then raises it again under the handler found
    # at its start: this one ends the process normally (its multiprocessing semaphores
    # released, not reported leaked by the resource tracker)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    uvicorn.Server(config).run(sockets=[sock])


def _socket(host: str, port: int, *, reuse_port: bool) -> socket.socket:
    family, kind, proto, _, address = socket.getaddrinfo(
        host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
    )[0]
    sock = socket.socket(family, kind, proto)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    if reuse_port:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    sock.bind(address)
    return sock


def check_port_free(host: str, port: int) -> None:
    """A clear error now if another program holds the port (each worker would fail to bind)."""
    try:
        _socket(host, port, reuse_port=False).close()
    except OSError as error:
        raise ValueError(f"cannot listen on {host}:{port}: {error.strerror}") from error
