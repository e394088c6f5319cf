"""Steps on Celery workers: dagster-celery's executor and execution loop, with each step's task
watched for the ways real clusters fail.

``PSP_EXECUTOR=celery`` makes every job send each step to a Celery worker (dagster-celery 0.29.27,
the ``cluster`` extra; workers: ``celery -A pipelines.celery_worker worker``, see
``scripts/cluster_e2e.py``). dagster-celery's own loop (``core_celery_execution_loop``) runs the
execution: priorities (the run's and the step's), the queue tag, the priority warning,
interrupts, instance concurrency pools. It takes the function that submits a step
(``step_execution_fn``); ours submits it as dagster-celery does (``_submit_task``) and hands the
loop a :class:`~pipelines.celery_step_monitor.WatchedStep` instead of Celery's result, so that:

* a step whose task stops renewing its lease (its worker died, was paused or cut off), whose
  worker dropped it between accepting and starting it, or whose pool process died is lost: it is
  fenced (a copy still alive stops itself before the retry starts, :mod:`pipelines.celery_step_heartbeat`)
  and fails through Dagster's retry machinery: the op's own ``RetryPolicy``, or else
  ``lost_worker_retries`` retries (default 2), so it runs again on whichever worker is free;
* a stopped run ends, with its steps terminated on their workers, within ``stop_wait_seconds``
  even when one of its workers is dead or paused.

Liveness is per task, not per worker name: a worker restarted under the same name, or paused and
resumed, runs its next step like any other. dagster-celery's private functions used here are
pinned by ``tests/pipelines/test_celery_seams.py``, which names the one that changed.
"""

from __future__ import annotations

from dagster import Field, Int, Noneable, Permissive, RetryPolicy, StringSource
from dagster_celery.executor import CeleryExecutor, _submit_task

from pipelines import celery_settings
from pipelines.celery_step_monitor import StepWatch, WatchedStep, lost_step_event
from pipelines.dagster_internals import RetryMode, get_retries_config

CONFIG_SCHEMA = {
    "broker": Field(
        Noneable(StringSource),
        is_required=False,
        description="The Celery broker's URL. Default: $PSP_CELERY_BROKER, else "
        f"{celery_settings.DEFAULT_BROKER}.",
    ),
    "backend": Field(
        Noneable(StringSource),
        is_required=False,
        description="The Celery result backend's URL. Default: $PSP_CELERY_BACKEND, else the "
        "broker's.",
    ),
    "config_source": Field(
        Noneable(Permissive()),
        is_required=False,
        description="More Celery settings, on top of the project's (pipelines/celery_settings.py).",
    ),
    "retries": get_retries_config(),
    "lost_worker_retries": Field(
        Int,
        default_value=2,
        description="Retries of a step whose worker died under it, for steps without a "
        "RetryPolicy of their own (0: such a step fails its run).",
    ),
    "stop_wait_seconds": Field(
        float,
        default_value=30.0,
        description="When a run is stopped, how long a step's task may take to end on its "
        "worker before the run ends without it (it is fenced: it stops itself).",
    ),
}


class PspCeleryExecutor(CeleryExecutor):
    """dagster-celery's ``CeleryExecutor`` whose steps are :class:`WatchedStep` s."""

    def __init__(
        self,
        retries: RetryMode,
        broker: str | None = None,
        backend: str | None = None,
        config_source: dict | None = None,
        lost_worker_retries: int = 2,
        stop_wait_seconds: float = 30.0,
    ) -> None:
        super().__init__(
            retries=retries,
            broker=broker or celery_settings.broker_url(),
            backend=backend or celery_settings.backend_url(),
            config_source={**celery_settings.config_source(), **(config_source or {})},
        )
        self.lost_worker_retries = int(lost_worker_retries)
        self.stop_wait_seconds = float(stop_wait_seconds)

    def execute(self, plan_context, execution_plan):
        from dagster_celery.core_execution_loop import core_celery_execution_loop

        fallback = (
            RetryPolicy(max_retries=self.lost_worker_retries)
            if self.lost_worker_retries > 0
            else None
        )
        watch: StepWatch | None = None

        def submit(app, job_context, step, queue, priority, known_state) -> WatchedStep:
            nonlocal watch
            if watch is None:
                watch = StepWatch(app)
            result = _submit_task(app, job_context, step, queue, priority, known_state)

            def lost_event(message: str):
                message = f'step "{step.key}" was lost: {message}'
                return lost_step_event(job_context, step, known_state, message, fallback)

            def free_slot() -> None:
                storage = job_context.instance.event_log_storage
                if storage.supports_global_concurrency_limits:
                    storage.free_concurrency_slot_for_step(job_context.run_id, step.key)

            return WatchedStep(result, watch, lost_event, self.stop_wait_seconds, free_slot)

        return core_celery_execution_loop(plan_context, execution_plan, step_execution_fn=submit)


def create_executor(init_context) -> PspCeleryExecutor:
    config = init_context.executor_config
    return PspCeleryExecutor(
        retries=RetryMode.from_config(config["retries"]),
        broker=config.get("broker"),
        backend=config.get("backend"),
        config_source=config.get("config_source"),
        lost_worker_retries=config["lost_worker_retries"],
        stop_wait_seconds=config["stop_wait_seconds"],
    )
