"""Running ``psp serve``: one process (the default), or ``--workers N`` processes on one port.

Each process builds the same app (:func:`serving_app`): its own copy of the models, watched for
promotions from the app's start to its end. With ``--workers N`` every worker listens on a
socket of its own with ``SO_REUSEPORT``, so the kernel spreads new connections over them. The
supervisor (the process ``psp serve`` started) replaces a worker that dies after it served, and
kills and replaces one whose event loop stops beating for ``--worker-timeout`` seconds (stopped,
or stuck: its share of new connections would hang); one
that fails before it ever served stops the server with that worker's error, as one line (the
next would fail the same way: no restart loop). SIGTERM or SIGINT to the supervisor stops every
worker gracefully, then the supervisor ends as the signal asks (``psp`` exits 143 or 130).

A worker ends by itself, within :data:`ORPHAN_GRACE` seconds, when its supervisor is gone,
whatever killed it (``kill -9`` included): each worker holds the read end of a pipe whose only
write end is the supervisor's, and a thread waits on it; the kernel closes it when the
supervisor's process ends, however it ends. The pipe was chosen over Linux's
``PR_SET_PDEATHSIG``: it works on every system, it follows the supervisor *process* (the death
signal follows the thread that started the worker), and the worker first stops gracefully
(requests in flight end) before the deadline ends it for sure, where a death signal is one
signal with no deadline.

Every process logs with the time, its pid and the level (:data:`LOG_FORMAT`), uvicorn's own
messages included; each worker logs each model it swaps in.

One process answers requests one Python thread at a time: tokenizing and writing the answer
hold the GIL, so a second core helps little, where a second worker process serves more
batches and lowers the tail latency (benchmarks/RESULTS.md#serve-load); each worker costs the
models' memory once more. (uvicorn's own ``workers`` shares one socket: the process that wakes
first takes a burst of keep-alive connections and keeps them, so separate sockets serve more.)
"""

from __future__ import annotations

import asyncio
import logging
import multiprocessing
import os
import signal
import socket
import sys
import threading
import time
from collections.abc import Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from psp_core.serving.limits import Limits

log = logging.getLogger(__name__)

#: every line of every server process: when, which process, how bad
LOG_FORMAT = "%(asctime)s %(process)d %(levelname)s %(name)s: %(message)s"
#: seconds a worker whose supervisor is gone gives its requests in flight before it exits
ORPHAN_GRACE = 3.0


class WorkerFailed(ValueError):
    """A ``--workers`` worker stopped before it ever served: its error, one line."""


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
    #: with --workers: seconds a worker's event loop may go without a heartbeat before the
    #: supervisor kills it and starts another (as gunicorn's ``--timeout``)
    worker_timeout: float = 30.0


def serving_app(settings: ServeSettings, on_serving: Callable[[], None] | None = None):
    """The app of one process: its models loaded now, watched for promotions while it serves;
    ``on_serving`` is called once it serves."""
    from starlette.requests import ClientDisconnect

    from psp_core.inference.fast.pooling import set_threads
    from psp_core.serving.app import create_app
    from psp_core.serving.models import ModelSet

    # one averaging thread (the compiled loop, so a worker does not import torch; torch's one
    # thread where something imported it): the worker processes are the parallelism, and
    # torch's pool of threads, woken once per piece of a large request, would spin on the
    # cores the other requests need (benchmarks/RESULTS.md#serve-fairness)
    set_threads(1)
    models = ModelSet(
        settings.folders,
        num_threads=settings.threads,
        word_cache_bytes=settings.limits.word_cache_bytes,
    )

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

    app = create_app(
        models,
        settings.limits,
        lifespan=lifespan,
        api_keys=settings.api_keys,
        cors_origins=settings.cors_origins,
    )
    # a client gone before its body arrived: nobody to answer, no traceback to log
    app.add_exception_handler(ClientDisconnect, _client_gone)
    return app


async def _client_gone(request, error):
    from starlette.responses import Response

    log.debug("%s %s: the client hung up mid-request", request.method, request.url.path)
    return Response(status_code=400)  # (never sent: the connection is closed)


def log_with_pid(level: int) -> None:
    """Log every line with :data:`LOG_FORMAT` (the handlers ``psp`` set, or a new one on
    stderr in a worker process, which starts with none)."""
    root = logging.getLogger()
    if not root.handlers:
        logging.basicConfig(level=level, format=LOG_FORMAT, stream=sys.stderr)
        return
    for handler in root.handlers:
        handler.setFormatter(logging.Formatter(LOG_FORMAT))


def uvicorn_config(app, settings: ServeSettings, **options):
    """uvicorn's configuration for ``app``: the protocol that enforces the connection limits
    (:mod:`psp_core.serving.connections`), no access log, no WebSockets, uvicorn's own
    messages through the root logger's format (time, pid, level)."""
    import uvicorn

    from psp_core.serving.connections import ensure_file_limit, guarded_protocol

    ensure_file_limit(settings.limits.max_connections)
    return uvicorn.Config(
        app,
        http=guarded_protocol(settings.limits),
        ws="none",
        timeout_keep_alive=settings.limits.keep_alive_timeout,
        log_level="warning",
        log_config=None,
        access_log=False,
        **options,
    )


def allocate_arrow_from_malloc() -> None:
    """Have pyarrow (the word cache splits texts with it) allocate from the C library's malloc
    in this process: its own default pool keeps what a burst of requests freed in each thread's
    heap, while malloc's free memory is given back when a large answer ends (connections.py; see
    benchmarks/RESULTS.md#serve-memory). An operator's own ``ARROW_DEFAULT_MEMORY_POOL``
    stands."""
    if "ARROW_DEFAULT_MEMORY_POOL" in os.environ:
        return
    import pyarrow

    pyarrow.set_memory_pool(pyarrow.system_memory_pool())


def serve(settings: ServeSettings, workers: int = 1) -> None:
    """Serve until SIGINT or SIGTERM (uvicorn's graceful shutdown: requests in flight end)."""
    log_with_pid(logging.getLogger().getEffectiveLevel())
    if workers > 1:
        _run_workers(settings, workers)
        return
    allocate_arrow_from_malloc()
    import uvicorn

    config = uvicorn_config(serving_app(settings), settings, host=settings.host, port=settings.port)
    server = uvicorn.Server(config)
    hung_up: list[int] = []

    def hang_up(signum, frame) -> None:  # as SIGTERM: a graceful stop (requests in flight end)
        hung_up.append(signum)
        server.handle_exit(signum, frame)

    previous = signal.signal(signal.SIGHUP, hang_up)  # (uvicorn handles SIGINT and SIGTERM)
    try:
        server.run()
    finally:
        signal.signal(signal.SIGHUP, previous)
    if hung_up:  # ended as the signal asks, by the handler found at the start (psp's: 129)
        signal.raise_signal(signal.SIGHUP)
    if not server.started:  # (as uvicorn.run ends: the app's start failed, its error logged)
        sys.exit(3)


def _run_workers(settings: ServeSettings, workers: int) -> None:
    check_port_free(settings.host, settings.port)
    context = multiprocessing.get_context("spawn")
    stopping, received = threading.Event(), []

    def stop(signum, frame) -> None:
        received.append(signum)
        stopping.set()

    # SIGHUP too: stopped as gracefully as SIGTERM, never interrupted mid-way by an exception
    stops = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
    previous = {sig: signal.signal(sig, stop) for sig in stops}
    level = logging.getLogger().getEffectiveLevel()
    running = [_Worker.start(context, settings, level) for _ in range(workers)]
    try:
        while not stopping.wait(0.5):
            for index, worker in enumerate(running):
                running[index] = _kept_or_replaced(worker, context, settings, level)
    finally:
        for worker in running:
            worker.process.terminate()  # uvicorn's graceful shutdown: requests in flight end
        for worker in running:
            worker.process.join(30)
            if worker.process.is_alive():
                worker.process.kill()
                worker.process.join()
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    if received:  # ended as the signal asks, by the handler found at the start (psp's: 143)
        signal.raise_signal(received[0])


def _kept_or_replaced(worker: _Worker, context, settings: ServeSettings, level: int) -> _Worker:
    """``worker`` while it serves; a new worker in place of one that ended after it served, or
    that stopped beating (killed first); :class:`WorkerFailed` for one that ended before it
    ever served (the next would fail the same way: no restart loop)."""
    if worker.process.is_alive():
        if not worker.hung(settings.worker_timeout):
            return worker
        log.warning(
            "psp serve worker %s did not answer for %g s (--worker-timeout): killed and replaced",
            worker.process.pid,
            settings.worker_timeout,
        )
        worker.process.kill()  # (SIGKILL ends a stopped process too)
        worker.process.join(10)
    elif not worker.served():
        raise WorkerFailed(
            worker.error
            or f"psp serve worker {worker.process.pid} exited ({worker.process.exitcode}) "
            "before it served: see its error above"
        )
    else:
        log.warning(
            "psp serve worker %s exited (%s): replaced", worker.process.pid, worker.process.exitcode
        )
    return _Worker.start(context, settings, level)


@dataclass
class _Worker:
    """A worker process, the pipe on which it says once whether it serves (None) or why it
    cannot (one line), and the pipe whose end tells it that this supervisor is gone."""

    process: Any
    reader: Any
    lifeline: Any
    #: when the worker's event loop last ran (``time.monotonic()``, the same clock in every
    #: process), in memory shared with it
    heartbeat: Any
    outcome: tuple | None = None

    @classmethod
    def start(cls, context, settings: ServeSettings, level: int) -> _Worker:
        reader, writer = context.Pipe(duplex=False)
        watched, lifeline = context.Pipe(duplex=False)
        heartbeat = context.Value("d", 0.0, lock=False)  # (one writer: no lock needed)
        process = context.Process(
            target=_worker, args=(settings, writer, watched, heartbeat, level), daemon=True
        )
        process.start()
        writer.close()  # the child's copies are the ones it uses: its end closes at its death,
        watched.close()  # and ours (lifeline, kept open) at ours
        return cls(process, reader, lifeline, heartbeat)

    def hung(self, timeout: float) -> bool:
        """Whether the worker serves but its event loop has not run for ``timeout`` seconds
        (stopped, or stuck in code that never yields)."""
        return self.served() and time.monotonic() - self.heartbeat.value > timeout

    def _read(self) -> None:
        if self.outcome is None and self.reader.poll():
            try:
                self.outcome = ("said", self.reader.recv())
            except EOFError:  # it ended without a word (killed while loading)
                self.outcome = ("silent", None)

    def served(self) -> bool:
        self._read()
        return self.outcome is not None and self.outcome == ("said", None)

    @property
    def error(self) -> str | None:
        self._read()
        return self.outcome[1] if self.outcome is not None else None


def _worker(settings: ServeSettings, ready, supervisor, heartbeat, level: int) -> None:
    """One worker process: its own socket on the shared port, uvicorn serving the app, its
    event loop beating ``heartbeat`` while it serves. What stops it from serving is sent to the
    supervisor as one line (no traceback for the errors ``psp`` reports as one line)."""
    import uvicorn

    from psp_core.models.bundle_config import BundleError

    # SIGTERM ends the process normally, so its multiprocessing objects are released, not
    # reported leaked by the resource tracker after the supervisor's last line: while the model
    # loads, and after uvicorn's graceful shutdown, which raises SIGTERM again under the
    # handler found at its start (this one)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    # tqdm's default lock is a multiprocessing one (in a spawned process, a named semaphore that
    # a killed worker would leave behind): one process needs only a thread lock
    from tqdm import tqdm

    tqdm.set_lock(threading.RLock())
    log_with_pid(level)
    allocate_arrow_from_malloc()
    # Ctrl-C reaches the whole process group: the supervisor alone acts on it, stopping every
    # worker (uvicorn takes SIGINT back while it serves, to stop gracefully)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    _end_with_supervisor(supervisor)
    try:
        sock = _socket(settings.host, settings.port, reuse_port=True)

        def on_serving() -> None:
            _beat(heartbeat, asyncio.get_running_loop(), settings.worker_timeout / 4)
            ready.send(None)

        app = serving_app(settings, on_serving=on_serving)
    except (BundleError, OSError, ValueError) as error:
        ready.send(_one_line(error))
        sys.exit(2)
    except Exception as error:
        ready.send(f"worker {os.getpid()}: {type(error).__name__}: {error} (traceback above)")
        raise
    config = uvicorn_config(app, settings, lifespan="on")
    uvicorn.Server(config).run(sockets=[sock])


def _beat(heartbeat, loop: asyncio.AbstractEventLoop, interval: float) -> None:
    """Write the time into ``heartbeat`` now and every ``interval`` seconds from ``loop``: the
    beats stop when the loop stops running."""
    heartbeat.value = time.monotonic()
    loop.call_later(min(interval, 1.0), _beat, heartbeat, loop, interval)


def _end_with_supervisor(supervisor) -> None:
    """A thread that waits for the supervisor's end of the pipe to close (the supervisor is
    gone, however it ended), then stops this worker gracefully, and for sure after
    :data:`ORPHAN_GRACE` seconds: the kernel's SIGALRM ends the process then (nothing here
    handles it), even if Python is still busy ending or no thread gets to run."""
    parent = os.getppid()

    def watch() -> None:
        try:
            supervisor.recv()  # the supervisor never writes: this returns at its end
        except (EOFError, OSError):
            pass
        signal.setitimer(signal.ITIMER_REAL, ORPHAN_GRACE)
        log.warning("the supervisor (pid %s) is gone: this worker stops", parent)
        os.kill(os.getpid(), signal.SIGTERM)  # uvicorn's graceful shutdown

    threading.Thread(target=watch, name="psp-supervisor-watch", daemon=True).start()


def _one_line(error: BaseException) -> str:
    """``PATH: reason`` for an OSError of the standard library, else the error's message."""
    if isinstance(error, OSError) and error.filename is not None and error.strerror:
        return f"{error.filename}: {error.strerror}"
    return str(error)


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
