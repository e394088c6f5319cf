"""The Celery app settings that the executor (``pipelines/celery_executor.py``) and the workers
(``pipelines/celery_worker.py``) share, from the environment, so that both sides always agree.

* ``PSP_CELERY_BROKER``: the broker URL (default ``redis://127.0.0.1:6379/0``);
* ``PSP_CELERY_BACKEND``: the result backend (default: the broker's URL).

Dagster's own Celery settings (``dagster_celery.config.DEFAULT_CONFIG``) plus these, each a choice
that makes a lost worker recoverable by Dagster rather than by the broker:

* ``task_track_started``: a task that runs reports STARTED with its worker's hostname and pid,
  which is how the executor knows whom to ask whether the step is still alive;
* ``task_acks_late = False`` (Celery's default, stated): the broker forgets a step once a worker
  starts it, so a step whose worker died is retried by Dagster's retry machinery, once, and never
  redelivered by the broker on top of that (with Redis, an hour later: its visibility timeout);
* ``worker_prefetch_multiplier = 1`` and ``worker_disable_prefetch``: a worker takes a step off
  the queue only when one of its processes is free, so a killed worker never takes queued steps
  with it, and steps go to the idle worker rather than queueing behind a busy one.
"""

from __future__ import annotations

import os

DEFAULT_BROKER = "redis://127.0.0.1:6379/0"

WORKER_SETTINGS = {
    "task_track_started": True,
    "task_acks_late": False,
    "worker_prefetch_multiplier": 1,
    "worker_disable_prefetch": True,
    "broker_connection_retry_on_startup": True,
    # results are read once by the run that sent the step; a week covers any paused run
    "result_expires": 7 * 24 * 3600,
    # a restarting broker or backend: retry (about a minute in all) rather than fail the step
    "result_backend_always_retry": True,
    "result_backend_max_retries": 12,
    "result_backend_max_sleep_between_retries_ms": 5000,
    "task_publish_retry_policy": {
        "max_retries": 30,
        "interval_start": 0,
        "interval_step": 1,
        "interval_max": 2,
    },
}

DEFAULT_HEARTBEAT_SECONDS = 2.0
DEFAULT_LEASE_SECONDS = 10.0


def _seconds(name: str, default: float) -> float:
    raw = os.environ.get(name, "").strip()
    if not raw:
        return default
    try:
        value = float(raw)
    except ValueError:
        raise ValueError(f"{name}={raw!r}: expected a number of seconds") from None
    if value <= 0:
        raise ValueError(f"{name}={raw!r}: expected a number of seconds above 0")
    return value


def heartbeat_seconds() -> float:
    """How often a running step renews its lease (``PSP_STEP_HEARTBEAT_SECONDS``)."""
    return _seconds("PSP_STEP_HEARTBEAT_SECONDS", DEFAULT_HEARTBEAT_SECONDS)


def lease_seconds() -> float:
    """How long a step's lease lasts unrenewed before its copy stops itself
    (``PSP_STEP_LEASE_SECONDS``; at least 3 heartbeats)."""
    lease = _seconds("PSP_STEP_LEASE_SECONDS", DEFAULT_LEASE_SECONDS)
    return max(lease, 3 * heartbeat_seconds())


def broker_url() -> str:
    return os.environ.get("PSP_CELERY_BROKER", "").strip() or DEFAULT_BROKER


def backend_url() -> str:
    return os.environ.get("PSP_CELERY_BACKEND", "").strip() or broker_url()


def config_source() -> dict:
    """The Celery settings of :data:`WORKER_SETTINGS` on top of dagster-celery's defaults."""
    from dagster_celery.config import DEFAULT_CONFIG

    return {**DEFAULT_CONFIG, **WORKER_SETTINGS}
