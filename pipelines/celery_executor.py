"""Steps on Celery workers: dagster-celery's executor, with a watch for lost workers.

``PSP_EXECUTOR=celery`` makes every job send each step to a Celery worker (dagster-celery 0.29.27,
the ``cluster`` extra; workers: ``celery -A pipelines.celery_worker worker``, see
``scripts/cluster_e2e.py``). The task, the app and the way events come back are dagster-celery's;
this module replaces its orchestration loop (``dagster_celery.core_execution_loop``) with one that
also notices a worker that died while it ran a step. dagster-celery's loop waits for ever on such
a step (a worker killed with ``kill -9`` never reports, and the broker forgot the task when the
worker started it) or, when only the worker's pool process died, fails the run. Here:

* a running step's task is STARTED with its worker's hostname (``task_track_started``); every
  ``liveness_check_seconds`` the loop pings the workers of the running steps, and a worker that
  misses ``missed_pings_for_lost`` pings in a row is lost;
* a task that failed with Celery's ``WorkerLostError`` (its pool process was killed) is lost too;
* a lost step fails with an error naming the worker, through Dagster's retry machinery: the op's
  own ``RetryPolicy``, or else ``lost_worker_retries`` retries (default 2), so the step runs
  again, on whichever worker is free, and the run goes on. Its pool slot (``psp_training``) is
  freed with the attempt, as for any retried step.

The rest is dagster-celery's loop, unchanged in behaviour: priorities, the queue tag,
interrupts (which also terminate the steps' processes on the workers here, so that a stopped run
leaves nothing running), and instance concurrency pools, which hold across workers and runs.
"""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass, field

from dagster import Executor, Field, Int, Noneable, Permissive, RetryPolicy, StringSource
from dagster import _check as check
from dagster._core.errors import DagsterSubprocessError
from dagster._core.events import DagsterEvent, EngineEventData
from dagster._core.execution.plan.instance_concurrency_context import InstanceConcurrencyContext
from dagster._core.execution.plan.objects import StepFailureData, StepRetryData
from dagster._core.execution.retries import RetryMode, get_retries_config
from dagster._utils.error import SerializableErrorInfo, serializable_error_info_from_exc_info
from dagster_shared.serdes import deserialize_value

from pipelines import celery_settings

DELEGATE_MARKER = "celery_queue_wait"  # dagster-celery's, so the UI pairs the engine events

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
    "liveness_check_seconds": Field(
        float, default_value=5.0, description="How often the workers of running steps are pinged."
    ),
    "missed_pings_for_lost": Field(
        Int,
        default_value=3,
        description="Pings in a row a worker must miss before its running steps are lost.",
    ),
}


@dataclass
class WorkerWatch:
    """Which workers of running steps still answer pings."""

    app: object
    interval: float
    missed_for_lost: int
    ping_timeout: float = 2.0
    missed: dict[str, int] = field(default_factory=dict)
    last_check: float = 0.0

    def check(self, hostnames: set[str]) -> None:
        """Ping ``hostnames`` (at most every ``interval`` seconds) and count missed replies."""
        now = time.monotonic()
        if not hostnames or now - self.last_check < self.interval:
            return
        self.last_check = now
        replies = self.app.control.ping(destination=sorted(hostnames), timeout=self.ping_timeout)
        answered = {name for reply in replies for name in reply}
        for name in hostnames:
            self.missed[name] = 0 if name in answered else self.missed.get(name, 0) + 1

    def lost(self, hostname: str) -> bool:
        return self.missed.get(hostname, 0) >= self.missed_for_lost


def started_on(result) -> str | None:
    """The hostname of the worker running ``result``'s task, when it is STARTED."""
    if result.state != "STARTED":
        return None
    info = result.info
    return info.get("hostname") if isinstance(info, dict) else None


def lost_step_event(job_context, step, known_state, message: str, fallback: RetryPolicy | None):
    """A retry of the step whose worker was lost (its RetryPolicy, else ``fallback``) or, with no
    retries left, its failure: the same decision Dagster takes for a step that raised."""
    step_context = job_context.for_step(step)
    error = SerializableErrorInfo(message=message, stack=[], cls_name="CeleryWorkerLost")
    policy = step_context.op_retry_policy or fallback
    attempts = known_state.get_retry_state().get_attempt_count(step.key)
    if policy and not step_context.retry_mode.disabled and attempts < policy.max_retries:
        return DagsterEvent.step_retry_event(
            step_context,
            StepRetryData(error=error, seconds_to_wait=policy.calculate_delay(attempts + 1)),
        )
    return DagsterEvent.step_failure_event(
        step_context, StepFailureData(error=error, user_failure_data=None)
    )


def _is_worker_lost(error: BaseException) -> bool:
    return type(error).__name__ == "WorkerLostError"


def execution_loop(job_context, execution_plan, executor: PspCeleryExecutor):
    """dagster-celery's ``core_celery_execution_loop`` with :class:`WorkerWatch` added."""
    from celery.exceptions import TaskRevokedError
    from dagster_celery.executor import _submit_task
    from dagster_celery.make_app import make_app
    from dagster_celery.tags import DAGSTER_CELERY_QUEUE_TAG, DAGSTER_CELERY_STEP_PRIORITY_TAG

    if execution_plan.step_keys_to_execute:
        check.invariant(
            execution_plan.artifacts_persisted,
            "Celery workers need outputs on a filesystem they share (an fs IO manager)",
        )
    app = make_app(executor.app_args())
    default_priority = app.conf.task_default_priority
    default_queue = app.conf.task_default_queue

    def priority(step) -> int:
        return int(step.tags.get(DAGSTER_CELERY_STEP_PRIORITY_TAG, default_priority))

    watch = WorkerWatch(app, executor.liveness_check_seconds, executor.missed_pings_for_lost)
    fallback = (
        RetryPolicy(max_retries=executor.lost_worker_retries)
        if executor.lost_worker_retries > 0
        else None
    )
    step_results = {}  # step key -> celery AsyncResult
    step_errors = {}
    with (
        InstanceConcurrencyContext(job_context.instance, job_context.dagster_run) as concurrency,
        execution_plan.start(
            retry_mode=executor.retries,
            sort_key_fn=lambda step: -priority(step),
            instance_concurrency_context=concurrency,
        ) as active_execution,
    ):
        stopping = False
        while (not active_execution.is_complete and not stopping) or step_results:
            if active_execution.check_for_interrupts():
                yield DagsterEvent.engine_event(
                    job_context,
                    "Celery executor: received termination signal - stopping the steps on the "
                    "workers",
                    EngineEventData.interrupted(list(step_results)),
                )
                stopping = True
                active_execution.mark_interrupted()
                for result in step_results.values():
                    result.revoke(terminate=True, signal="SIGTERM")

            running = {key: started_on(result) for key, result in step_results.items()}
            watch.check({host for host in running.values() if host})
            finished = []
            for step_key, result in step_results.items():
                step = active_execution.get_step_by_key(step_key)
                lost = None
                if result.ready():
                    step_events = []
                    try:
                        step_events = result.get()
                    except TaskRevokedError:
                        yield DagsterEvent.engine_event(
                            job_context.for_step(step),
                            f'celery task for running step "{step_key}" was revoked.',
                            EngineEventData(marker_end=DELEGATE_MARKER),
                        )
                    except Exception as error:
                        if _is_worker_lost(error) and not stopping:
                            lost = f"its Celery worker's process died: {error}"
                        else:
                            step_errors[step_key] = serializable_error_info_from_exc_info(
                                sys.exc_info()
                            )
                    for serialized in step_events:
                        event = deserialize_value(serialized, DagsterEvent)
                        yield event
                        active_execution.handle_event(event)
                    finished.append(step_key)
                elif running[step_key] and watch.lost(running[step_key]) and not stopping:
                    lost = (
                        f"its Celery worker {running[step_key]} stopped answering "
                        f"({watch.missed_for_lost} pings in a row)"
                    )
                    result.revoke(terminate=True, signal="SIGKILL")  # if it ever comes back
                    finished.append(step_key)
                if lost is not None:
                    event = lost_step_event(
                        job_context,
                        step,
                        active_execution.get_known_state(),
                        f'step "{step_key}" was lost: {lost}',
                        fallback,
                    )
                    yield event
                    active_execution.handle_event(event)
            for step_key in finished:
                del step_results[step_key]
                active_execution.verify_complete(job_context, step_key)

            yield from active_execution.plan_events_iterator(job_context)
            if stopping or step_errors:
                continue
            for step in active_execution.get_steps_to_execute():
                queue = step.tags.get(DAGSTER_CELERY_QUEUE_TAG, default_queue)
                yield DagsterEvent.engine_event(
                    job_context.for_step(step),
                    f'Submitting celery task for step "{step.key}" to queue "{queue}".',
                    EngineEventData(marker_start=DELEGATE_MARKER),
                )
                step_results[step.key] = _submit_task(
                    app,
                    job_context,
                    step,
                    queue,
                    priority(step),
                    active_execution.get_known_state(),
                )
            time.sleep(executor.tick_seconds)

        if step_errors:
            raise DagsterSubprocessError(
                "During celery execution errors occurred in workers:\n"
                + "\n".join(f"[{key}]: {err.to_string()}" for key, err in step_errors.items()),
                subprocess_error_infos=list(step_errors.values()),
            )


class PspCeleryExecutor(Executor):
    """dagster-celery's ``CeleryExecutor`` (its app arguments and task) run by
    :func:`execution_loop`."""

    tick_seconds = 0.5

    def __init__(
        self,
        retries: RetryMode,
        broker: str | None = None,
        backend: str | None = None,
        config_source: dict | None = None,
        lost_worker_retries: int = 2,
        liveness_check_seconds: float = 5.0,
        missed_pings_for_lost: int = 3,
    ) -> None:
        from dagster_celery.executor import CeleryExecutor

        self._celery = CeleryExecutor(
            retries=retries,
            broker=broker or celery_settings.broker_url(),
            backend=backend or celery_settings.backend_url(),
            config_source={**celery_settings.config_source(), **(config_source or {})},
        )
        self.lost_worker_retries = check.int_param(lost_worker_retries, "lost_worker_retries")
        self.liveness_check_seconds = float(liveness_check_seconds)
        self.missed_pings_for_lost = check.int_param(missed_pings_for_lost, "missed_pings")

    @property
    def retries(self) -> RetryMode:
        return self._celery.retries

    def app_args(self) -> dict:
        return self._celery.app_args()

    def execute(self, plan_context, execution_plan):
        return execution_loop(plan_context, execution_plan, self)


def create_executor(init_context) -> PspCeleryExecutor:
    config = init_context.executor_config
    return PspCeleryExecutor(
        retries=RetryMode.from_config(config["retries"]),
        broker=config.get("broker"),
        backend=config.get("backend"),
        config_source=config.get("config_source"),
        lost_worker_retries=config["lost_worker_retries"],
        liveness_check_seconds=config["liveness_check_seconds"],
        missed_pings_for_lost=config["missed_pings_for_lost"],
    )
