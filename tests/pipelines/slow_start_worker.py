"""A Celery worker app (``celery -A tests.pipelines.slow_start_worker worker``) that waits
``PSP_TEST_START_DELAY`` seconds between accepting a step's task and starting it: the window in
which a worker killed leaves a task neither queued nor STARTED (``tests/pipelines/test_celery.py``,
``scripts/cluster_e2e.py``)."""

from __future__ import annotations

import os
import time
from pathlib import Path

from celery.signals import task_prerun

from pipelines.celery_worker import app, execute_plan  # noqa: F401  (the worker's task)


@task_prerun.connect
def wait_before_starting(task_id=None, **_) -> None:
    marker = os.environ.get("PSP_TEST_ACCEPTED_MARKER")
    if marker:
        Path(marker).write_text(str(task_id))
    time.sleep(float(os.environ.get("PSP_TEST_START_DELAY", "0")))
