"""A Celery worker app (``celery -A tests.pipelines.slow_start_worker worker``) that waits
``PSP_TEST_START_DELAY`` seconds between accepting a step's task and starting it: the window in
which a worker killed leaves a task neither queued nor STARTED (``tests/pipelines/test_celery.py``,
``scripts/cluster_e2e.py``).

``PSP_TEST_DELAY_STEPS`` (comma-separated step keys) limits the wait, and the marker, to those
steps: any other task (say, a scoreboard run the daemon's automation launched meanwhile) runs at
once, so the marker names the step the caller is waiting for, not whichever task came first.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

from celery.signals import task_prerun
from dagster._grpc.types import ExecuteStepArgs
from dagster._serdes import unpack_value

from pipelines.celery_worker import app, execute_plan  # noqa: F401  (the worker's task)


def _step_keys(kwargs: dict | None) -> list[str]:
    packed = (kwargs or {}).get("execute_step_args_packed")
    if packed is None:
        return []
    return list(unpack_value(packed, as_type=ExecuteStepArgs).step_keys_to_execute or [])


@task_prerun.connect
def wait_before_starting(task_id=None, kwargs=None, **_) -> None:
    delayed = [s for s in os.environ.get("PSP_TEST_DELAY_STEPS", "").split(",") if s]
    if delayed and not set(delayed) & set(_step_keys(kwargs)):
        return
    marker = os.environ.get("PSP_TEST_ACCEPTED_MARKER")
    if marker:
        Path(marker).write_text(str(task_id))
    time.sleep(float(os.environ.get("PSP_TEST_START_DELAY", "0")))
