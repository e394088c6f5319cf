"""The code location's executor: Dagster's in-process executor by default (multiprocess by run
config) plus a watch for dead runs, so that a run killed with ``kill -9`` never blocks the next.

In-process by default: a language's run is a chain (each stage needs the one before), so the
multiprocess executor never runs two of its steps at once, yet it starts a process per step that
imports the code location again (torch, pyarrow, Dagster: seconds each), which made a re-run
with every stage reused slow (benchmarks/RESULTS.md#noop-rerun). ``execution: {config: {multiprocess: {}}}``
still selects it (a step then runs in a process of its own, and a crash of one step cannot take
the run worker down with it).

Before a run executes its plan it names its language and profile in its tags where its launch
did not (the launchpad, ``dagster job execute``: the schedule's and the sensor's runs have them),
so the runs list tells a smoke run from a paper run; it records its worker
(``pipelines.dead_runs.record_worker``),
fails the runs on this host whose worker is gone and frees their concurrency slots; while it
executes, a thread repeats that every ``POLL_SECONDS``, so a run waiting for the
``psp_training`` pool gets the slot of a holder that was killed meanwhile.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator
from contextlib import contextmanager

from dagster import (
    DagsterEvent,
    DagsterInstance,
    DagsterRun,
    Executor,
    ExecutorDefinition,
    Field,
    multi_or_in_process_executor,
    multiple_process_executor_requirements,
)

from assets.settings.profiles import profile_from_environment
from pipelines.dead_runs import POLL_SECONDS, fail_dead_runs, record_worker

log = logging.getLogger(__name__)
LANGUAGE_TAG, PROFILE_TAG = "psp/language", "psp/profile"


def run_labels(run: DagsterRun) -> dict[str, str]:
    """The ``psp/language`` and ``psp/profile`` tags ``run`` lacks: its partition, and the
    profile its run config names (else the code location's default, ``PSP_PROFILE``)."""
    labels = {}
    partition = run.tags.get("dagster/partition")
    if partition and LANGUAGE_TAG not in run.tags:
        labels[LANGUAGE_TAG] = partition
    if PROFILE_TAG not in run.tags:
        resource = ((run.run_config or {}).get("resources") or {}).get("profile") or {}
        named = (resource.get("config") or {}).get("name")
        labels[PROFILE_TAG] = str(named or profile_from_environment().value)
    return labels


def label_run(instance: DagsterInstance, run: DagsterRun) -> None:
    """Tag ``run`` with :func:`run_labels`."""
    labels = run_labels(run)
    if labels:
        instance.add_run_tags(run.run_id, labels)


class _DeadRunWatch:
    """Fails dead runs now and then every ``interval`` seconds on a thread of its own (with its
    own instance, so it never shares a storage connection with the run's thread)."""

    def __init__(self, instance: DagsterInstance, run_id: str, interval: float) -> None:
        self._instance = instance
        self._run_id = run_id
        self._interval = interval
        self._stop = threading.Event()

    def _report(self, instance: DagsterInstance, message: str) -> None:
        log.warning(message)
        run = instance.get_run_by_id(self._run_id)
        if run is not None:  # say it in this run's event log too (the UI)
            instance.report_engine_event(message, dagster_run=run)

    def check(self, instance: DagsterInstance) -> None:
        """Fail dead runs; a failure to look never fails this run (logged, tried again)."""
        try:
            fail_dead_runs(instance, lambda message: self._report(instance, message))
        except Exception:
            log.exception("looking for dead runs failed; trying again in %ss", self._interval)

    def _loop(self) -> None:
        instance = DagsterInstance.from_ref(self._instance.get_ref())
        try:
            while not self._stop.wait(self._interval):
                self.check(instance)
        finally:
            instance.dispose()

    @contextmanager
    def running(self) -> Iterator[None]:
        if self._instance.is_ephemeral:  # an in-memory instance has no other runs
            yield
            return
        thread = threading.Thread(target=self._loop, name="psp-dead-run-watch", daemon=True)
        thread.start()
        try:
            yield
        finally:
            self._stop.set()
            thread.join(timeout=30)


class DeadRunWatchingExecutor(Executor):
    """Runs ``inner``'s execution with a :class:`_DeadRunWatch` around it."""

    def __init__(self, inner: Executor, interval: float = POLL_SECONDS) -> None:
        self._inner = inner
        self._interval = interval

    @property
    def retries(self):
        return self._inner.retries

    @property
    def step_dependency_config(self):
        return self._inner.step_dependency_config

    def get_step_event_or_retry_event(self, *args, **kwargs):
        return self._inner.get_step_event_or_retry_event(*args, **kwargs)

    def __getattr__(self, name: str):
        """What an execution loop reads from its executor (dagster-celery's: ``app_args``)."""
        if name.startswith("__"):
            raise AttributeError(name)
        return getattr(self._inner, name)

    def execute(self, plan_context, execution_plan) -> Iterator[DagsterEvent]:
        instance = plan_context.instance
        watch = _DeadRunWatch(instance, plan_context.run_id, self._interval)
        if not instance.is_ephemeral:
            label_run(instance, plan_context.dagster_run)
            record_worker(instance, plan_context.run_id)
            watch.check(instance)
        with watch.running():
            yield from self._inner.execute(plan_context, execution_plan)


def _create(init_context) -> Executor:
    inner = multi_or_in_process_executor.executor_creation_fn(init_context)
    return DeadRunWatchingExecutor(inner)


#: Dagster's selector of ``multiprocess`` / ``in_process`` settings, with in_process as default
EXECUTOR_CONFIG = Field(
    multi_or_in_process_executor.config_schema.config_type,
    default_value={"in_process": {}},
    description="in_process (the default: one process runs the steps one after another) or "
    "multiprocess (a process per step).",
)

psp_executor = ExecutorDefinition(
    name="psp_executor",
    config_schema=EXECUTOR_CONFIG,
    requirements=multi_or_in_process_executor.get_requirements,
    executor_creation_fn=_create,
    description=(
        "Dagster's executor, in_process by default (multiprocess by run config), that also "
        "fails runs whose worker process died on this host and frees their pool slots."
    ),
)


def _create_celery(init_context) -> Executor:
    from pipelines.celery_executor import create_executor

    return DeadRunWatchingExecutor(create_executor(init_context))


def celery_executor_definition() -> ExecutorDefinition:
    """:mod:`pipelines.celery_executor` (dagster-celery's executor with a watch for lost
    workers) plus the dead-run watch for the run worker itself."""
    try:
        from pipelines.celery_executor import CONFIG_SCHEMA
    except ImportError as error:
        raise ImportError(
            "PSP_EXECUTOR=celery needs dagster-celery: pip install -e '.[cluster]'"
        ) from error
    return ExecutorDefinition(
        name="psp_celery_executor",
        config_schema=CONFIG_SCHEMA,
        requirements=multiple_process_executor_requirements(),
        executor_creation_fn=_create_celery,
        description=(
            "Each step on a Celery worker (dagster-celery); a step whose worker died is retried "
            "on another one. Broker: $PSP_CELERY_BROKER."
        ),
    )


def code_location_executor() -> ExecutorDefinition:
    """The executor of every job, chosen by ``PSP_EXECUTOR``: unset, :data:`psp_executor`;
    ``celery``, :func:`celery_executor_definition` (steps on Celery workers, the ``cluster``
    extra; ``scripts/cluster_e2e.py`` runs it); ``k8s`` (the Kubernetes deployment in
    ``deploy/``), dagster-k8s's ``k8s_job_executor``, a pod per step with the run launcher's
    image, environment and volumes (the storage root's shared volume). There the dead-run watch
    is the cluster's: Kubernetes restarts or fails the pods."""
    import os

    choice = os.environ.get("PSP_EXECUTOR", "").strip() or "default"
    if choice == "default":
        return psp_executor
    if choice == "celery":
        return celery_executor_definition()
    if choice == "k8s":
        try:
            from dagster_k8s import k8s_job_executor
        except ImportError as error:
            raise ImportError(
                "PSP_EXECUTOR=k8s needs dagster-k8s: pip install -e '.[k8s]'"
            ) from error
        return k8s_job_executor
    raise ValueError(
        f"PSP_EXECUTOR={choice!r}: expected celery or k8s, or unset for the default executor"
    )
