"""A job for the Celery executor tests (``tests/pipelines/test_celery.py``), importable by the
workers: one op whose first attempt records where it runs and then works (stamping
``attempt-1.alive`` every 0.1 s) for ``PSP_TEST_FIRST_ATTEMPT_SECONDS`` (default 120: until it
is killed), and whose next attempts finish at once, then an op downstream of it."""

from __future__ import annotations

import json
import os
import socket
import time
from pathlib import Path

from dagster import Definitions, job, op

from pipelines.executor import celery_executor_definition


def _attempts_dir() -> Path:
    return Path(os.environ["PSP_TEST_ATTEMPTS"])


def _write_whole(path: Path, text: str) -> None:
    """Write ``text`` under a temporary name, then rename: a reader never sees it half written,
    even when the writer is paused (SIGSTOP) or killed mid-write."""
    partial = path.with_name(f".{path.name}.{os.getpid()}")
    partial.write_text(text)
    os.replace(partial, path)


@op
def long_step() -> int:
    """Attempt N writes ``attempt-N.json`` (worker, pid, start time); the first then works."""
    attempts = sorted(_attempts_dir().glob("attempt-*.json"))
    record = {"worker": os.environ.get("PSP_TEST_WORKER", "?"), "pid": os.getpid()}
    record |= {"host": socket.gethostname(), "started": time.time()}
    path = _attempts_dir() / f"attempt-{len(attempts) + 1}.json"
    _write_whole(path, json.dumps(record))
    if not attempts:
        alive = _attempts_dir() / "attempt-1.alive"
        end = time.monotonic() + float(os.environ.get("PSP_TEST_FIRST_ATTEMPT_SECONDS", "120"))
        while time.monotonic() < end:
            _write_whole(alive, repr(time.time()))
            time.sleep(0.1)
    return len(attempts) + 1


@op
def after(attempt: int) -> int:
    return attempt


@job(executor_def=celery_executor_definition())
def lost_worker_job() -> None:
    after(long_step())


defs = Definitions(jobs=[lost_worker_job])
