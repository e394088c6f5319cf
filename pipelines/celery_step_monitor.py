"""The executor's half of a Celery step's lease (:mod:`pipelines.celery_step_heartbeat`): each step is judged
by its own task, never by its worker's name.

:class:`WatchedStep` is what :mod:`pipelines.celery_executor` gives dagster-celery's execution
loop instead of Celery's ``AsyncResult``: the loop asks it ``ready()``, ``get()`` and
``revoke()``, as it would the result. It is ready when the task's result is, and also when:

* the task is ``STARTED`` and its beat has not moved for :func:`~pipelines.celery_step_heartbeat.lost_after`
  seconds (its worker died, was paused or cut off; a worker that came back under the same name
  does not renew a task it no longer runs);
* the task is ``RECEIVED`` by a worker that stopped answering for as long, or that answers and
  no longer holds it (killed between accepting the task and starting it, restarted since);
* its pool process died (Celery's ``WorkerLostError``).

Such a step is fenced first (a copy still alive stops itself), then ``get()`` returns the step's
retry, or its failure when no retry is left: the same decision Dagster takes for a step that
raised (:func:`lost_step_event`). After ``revoke()`` (the run is being stopped) the step is fenced
for stopping and is ready, as revoked, as soon as its task ends or is found lost, and at most
``stop_wait_seconds`` later: a stopped run ends even when a worker is gone, and its concurrency
slot is freed then (the next run's training does not wait for Dagster's run monitoring).

A task still ``PENDING`` is in the broker's queue waiting for a free worker, which is not a
fault (a durable broker keeps it across a restart, see docs/scaling.md).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from celery import states
from dagster import RetryPolicy
from dagster_shared.serdes import serialize_value

from pipelines import celery_step_heartbeat
from pipelines.dagster_internals import step_failure_or_retry

log = logging.getLogger(__name__)

RECEIVED_CHECK_SECONDS = 2.0  # how often workers are asked about the tasks they received
BACKEND_OUTAGE_SECONDS = 300.0  # the result backend unreachable this long fails the steps


def lost_step_event(job_context, step, known_state, message: str, fallback: RetryPolicy | None):
    """A retry of the step whose worker was lost (its RetryPolicy, else ``fallback``) or, with no
    retries left, its failure."""
    attempts = known_state.get_retry_state().get_attempt_count(step.key)
    return step_failure_or_retry(
        job_context.for_step(step), attempts, message, "CeleryWorkerLost", fallback
    )


def _is_worker_lost(error) -> bool:
    return type(error).__name__ == "WorkerLostError"


@dataclass
class Received:
    """A RECEIVED task's standing with its worker."""

    hostname: str
    since: float  # monotonic time its worker last answered (or the task was first seen)
    unknown: int = 0  # checks in a row in which its worker answered without it


@dataclass
class StepWatch:
    """Liveness of the tasks of one execution: beats of STARTED tasks, and for RECEIVED ones,
    whether their worker still holds them (asked every :data:`RECEIVED_CHECK_SECONDS`)."""

    app: object
    clock: Callable[[], float] = time.monotonic
    beats: dict[str, tuple[object, float]] = field(default_factory=dict)  # id -> (beat, seen)
    received: dict[str, Received] = field(default_factory=dict)
    last_query: float = 0.0
    backend_down_since: float | None = None

    def backend_failed(self) -> float:
        """Note a failed read; how long the backend has been unreachable."""
        now = self.clock()
        if self.backend_down_since is None:
            self.backend_down_since = now
        return now - self.backend_down_since

    def backend_answered(self) -> None:
        """After an outage every clock restarts: no task is judged by the executor's own gap."""
        if self.backend_down_since is not None:
            now = self.clock()
            self.beats = {key: (beat, now) for key, (beat, _) in self.beats.items()}
            for entry in self.received.values():
                entry.since = now
            self.backend_down_since = None

    def verdict(self, task_id: str, state: str, meta) -> str | None:
        """Why the task is lost, or ``None`` while it may still be alive."""
        now = self.clock()
        if state == states.STARTED:
            self.received.pop(task_id, None)
            beat = meta.get("beat") if isinstance(meta, dict) else None
            previous = self.beats.get(task_id)
            if previous is None or previous[0] != beat:
                self.beats[task_id] = (beat, now)
                return None
            silent = now - previous[1]
            if silent > celery_step_heartbeat.lost_after(meta):
                host = meta.get("hostname", "?") if isinstance(meta, dict) else "?"
                return f"its task on {host} stopped renewing its lease ({silent:.0f} s)"
            return None
        if state == celery_step_heartbeat.RECEIVED and isinstance(meta, dict):
            entry = self.received.get(task_id)
            if entry is None or entry.hostname != meta.get("hostname"):
                self.received[task_id] = Received(meta.get("hostname", "?"), now)
                return None
            if entry.unknown >= 2:
                return f"its worker {entry.hostname} no longer holds it (restarted?)"
            silent = now - entry.since
            if silent > celery_step_heartbeat.lost_after(meta):
                return f"its worker {entry.hostname} received it, then stopped answering"
        return None

    def ask_workers(self) -> None:
        """Ask the workers of RECEIVED tasks which of them they hold (one broadcast)."""
        now = self.clock()
        if not self.received or now - self.last_query < RECEIVED_CHECK_SECONDS:
            return
        self.last_query = now
        hosts = sorted({entry.hostname for entry in self.received.values()})
        try:
            inspect = self.app.control.inspect(destination=hosts, timeout=1.0, limit=len(hosts))
            replies = inspect.query_task(*self.received) or {}
        except Exception as error:  # the broker is away: nobody is judged on this check
            log.warning("could not ask workers %s about their tasks: %s", hosts, error)
            return
        for task_id, entry in self.received.items():
            reply = replies.get(entry.hostname)
            if reply is None:
                continue  # no answer: ``since`` stays, the silence grows
            entry.since = now
            entry.unknown = 0 if task_id in reply else entry.unknown + 1

    def forget(self, task_id: str) -> None:
        self.beats.pop(task_id, None)
        self.received.pop(task_id, None)


class WatchedStep:
    """One step's Celery task, as the execution loop sees it (see the module's docstring)."""

    def __init__(
        self,
        result,
        watch: StepWatch,
        lost_event,
        stop_wait_seconds: float,
        free_slot=None,
    ) -> None:
        self.result = result
        self.watch = watch
        self.lost_event = lost_event  # message -> the DagsterEvent of a lost step
        self.stop_wait_seconds = stop_wait_seconds
        self.free_slot = free_slot  # frees the step's concurrency slot, if it holds one
        self.revoked_at: float | None = None
        self.outcome: tuple[str, object] | None = None  # ("result"|"lost"|"revoked", value)

    @property
    def id(self) -> str:
        return self.result.id

    def _fence(self, reason: str) -> None:
        try:
            celery_step_heartbeat.fence(self.result.backend, self.result.id, reason)
        except Exception as error:  # its copy then stops on its lease, unrenewable or unfenced
            log.warning("could not fence task %s: %s", self.result.id, error)

    def _settle(self, kind: str, value) -> bool:
        self.outcome = (kind, value)
        self.watch.forget(self.result.id)
        return True

    def _lost(self, message: str) -> bool:
        if self.revoked_at is not None:
            return self._settle("revoked", message)
        self._fence(celery_step_heartbeat.LOST)
        try:  # a worker that comes back still gets told (Celery's own revoke)
            self.result.app.control.revoke(self.result.id, terminate=True, signal="SIGKILL")
        except Exception:
            pass
        return self._settle("lost", message)

    def ready(self) -> bool:
        if self.outcome is not None:
            return True
        try:
            task = self.result.backend.get_task_meta(self.result.id)
        except Exception as error:
            down = self.watch.backend_failed()
            if down > BACKEND_OUTAGE_SECONDS:
                return self._lost(f"its result backend was unreachable for {down:.0f} s: {error}")
            return False
        self.watch.backend_answered()
        state, meta = task.get("status", states.PENDING), task.get("result")
        if state in states.READY_STATES:
            if state == states.FAILURE and _is_worker_lost(meta):
                return self._lost(f"its Celery worker's process died: {meta}")
            if state == states.REVOKED:
                return self._settle("revoked", meta)
            return self._settle("result", (state, meta))
        self.watch.ask_workers()
        verdict = self.watch.verdict(self.result.id, state, meta)
        if verdict is not None:
            return self._lost(verdict)
        if self.revoked_at is not None:
            waited = time.monotonic() - self.revoked_at
            if waited > self.stop_wait_seconds:
                return self._settle("revoked", f"still {state} {waited:.0f} s after the stop")
        return False

    def get(self):
        """The step's serialized events (dagster-celery's task result), or raises as
        ``AsyncResult.get`` would."""
        from celery.exceptions import TaskRevokedError

        kind, value = self.outcome
        if kind == "revoked":
            self._free_slot()
            raise TaskRevokedError(str(value))
        if kind == "lost":
            return [serialize_value(self.lost_event(value))]
        state, meta = value
        if state == states.SUCCESS:
            return meta
        raise meta if isinstance(meta, BaseException) else RuntimeError(f"{state}: {meta}")

    def _free_slot(self) -> None:
        """A stopped step reports no end of its own, so its pool slot (``psp_training``) would
        stay taken until Dagster's run monitoring frees it (30 s and more after the run ends):
        free it now, its task being ended or fenced."""
        if self.free_slot is None:
            return
        try:
            self.free_slot()
        except Exception as error:
            log.warning("could not free the concurrency slot of task %s: %s", self.id, error)

    def revoke(self, *args, **kwargs) -> None:
        """The run is being stopped: terminate the task where it runs (Celery's revoke, and the
        fence for a worker that misses the broadcast)."""
        if self.revoked_at is not None:
            return
        self.revoked_at = time.monotonic()
        self._fence(celery_step_heartbeat.STOP)
        try:
            self.result.revoke(terminate=True, signal="SIGTERM")
        except Exception as error:
            log.warning("could not revoke task %s: %s", self.result.id, error)
