"""The Celery app a worker runs: ``celery -A pipelines.celery_worker worker``.

dagster-celery's step task (``execute_plan``) on an app with the executor's settings
(``pipelines/celery_settings.py``: the broker from ``PSP_CELERY_BROKER``), so a worker and the
runs that send it steps always agree. A worker also needs what a run needs: ``DAGSTER_HOME``
(the instance the steps report to), this repository on ``PYTHONPATH``, and the code location's
environment (``PSP_STORAGE_ROOT`` on a filesystem every worker shares, ``PSP_LANGUAGES``...).
Start each with ``--concurrency 1`` per core it may use (a step already uses
``ComputeResource.threads`` cores) and a name of its own (``-n worker-1@%h``).

The step task holds a lease while it runs (:class:`pipelines.celery_step_heartbeat.LeasedTask`), and the
worker records each step it receives (:func:`pipelines.celery_step_heartbeat.record_received`): how the
executor tells a live step from a lost one, whatever happened to the worker.
"""

from __future__ import annotations

import multiprocessing
import multiprocessing.process

from celery.signals import task_received, worker_process_init
from dagster_celery.config import TASK_EXECUTE_PLAN_NAME
from dagster_celery.executor import CeleryExecutor
from dagster_celery.make_app import make_app
from dagster_celery.tasks import create_task

from pipelines import celery_settings
from pipelines.celery_step_heartbeat import LeasedTask, record_received

app = make_app(
    CeleryExecutor.for_cli(
        broker=celery_settings.broker_url(),
        backend=celery_settings.backend_url(),
        config_source=celery_settings.config_source(),
    ).app_args()
)
execute_plan = create_task(app, base=LeasedTask)


@task_received.connect
def step_received(request=None, **_) -> None:
    if request is not None and request.name == TASK_EXECUTE_PLAN_NAME:
        record_received(app, request)


@worker_process_init.connect
def allow_child_processes(**_) -> None:
    """Let a step start processes of its own, as language ID and the encoding do
    (``ops/ordered_pool.py``, from a fork server; it stops and joins them itself). Celery's pool
    processes are billiard's, which Python's multiprocessing then takes for its current process:
    daemonic ("daemonic processes are not allowed to have children") and holding an authentication
    key of billiard's type, which multiprocessing refuses to send to its fork server. Make the
    process non-daemonic and its key multiprocessing's own (the same bytes)."""
    process = multiprocessing.current_process()
    process._config["daemon"] = False
    key = process._config.get("authkey")
    if key is not None:
        process._config["authkey"] = multiprocessing.process.AuthenticationString(bytes(key))
