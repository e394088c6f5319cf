"""The worker's half of a Celery step's lease: each running step proves it is alive, and a copy
that may have been replaced stops itself.

The executor (:mod:`pipelines.celery_step_monitor`) judges each step by its own task, never by its
worker's name: a worker restarted under the same name, paused or cut off is judged by what its
task says. Here, on the worker:

* when a worker's main process receives a step's task it records ``RECEIVED`` with its name
  (:func:`record_received`), so a task accepted and not yet started is watched too;
* while the step runs, :class:`StepLease` renews the task's ``STARTED`` state every
  ``heartbeat_seconds`` with a counter (``beat``) and the lease's length, in the result backend
  the executor reads;
* the same process stops itself (``SIGKILL``, its child processes first) when it could not renew
  the lease for ``lease_seconds`` (it was paused, or cut off from the backend: the executor may
  have given its step to another worker by now; a process resumed after a pause checks this in
  its ``SIGCONT`` handler, on the step's own thread, before the step runs another line), when the executor fenced its task (the step was
  declared lost and retried, or the run was stopped: :func:`fence`), or when its worker's main
  process is gone (Celery's pool processes are made non-daemonic in
  :mod:`pipelines.celery_worker`, so nothing else would end it);
* a task fenced before it starts does nothing (:class:`LeasedTask`).

The executor declares a step lost only after ``lease_seconds + 2 * heartbeat_seconds + 1``
without a new beat (:func:`lost_after`), by which time a copy that still runs has stopped itself
or will on its first instant awake, before it writes anything: at most one copy of a step is
ever live, and the ``psp_training`` pool's limit holds however a worker fails.
"""

from __future__ import annotations

import logging
import os
import signal
import threading
import time

from celery import Task
from celery.exceptions import Ignore

from pipelines import celery_settings

log = logging.getLogger(__name__)

RECEIVED = "RECEIVED"  # Celery's name for the event; stored here by the worker's main process
FENCED = "FENCED"  # the state of a task's fence record (a state of our own, never "ready")
LOST, STOP = "lost", "stop"  # why a task was fenced
WATCHDOG_SECONDS = 0.2


def fence_id(task_id: str) -> str:
    """The backend record that fences ``task_id``."""
    return f"psp-fence-{task_id}"


def fence(backend, task_id: str, reason: str) -> None:
    """Fence ``task_id`` for ``reason`` (:data:`LOST`: its copy kills itself at once;
    :data:`STOP`: the run was stopped, its copy is terminated)."""
    backend.store_result(fence_id(task_id), {"reason": reason, "at": time.time()}, FENCED)


def fenced(backend, task_id: str) -> str | None:
    """Why ``task_id`` was fenced, or ``None``."""
    meta = backend.get_task_meta(fence_id(task_id), cache=False)
    if meta.get("status") != FENCED:
        return None
    result = meta.get("result")
    return result.get("reason", LOST) if isinstance(result, dict) else LOST


def lost_after(meta: dict | None) -> float:
    """Seconds without a new beat after which the executor may take a step for lost: longer than
    the lease its copy holds (``meta`` is what the worker wrote, so both sides use its settings)."""
    meta = meta if isinstance(meta, dict) else {}
    beat = float(meta.get("beat_s") or celery_settings.heartbeat_seconds())
    lease = float(meta.get("lease_s") or celery_settings.lease_seconds())
    return lease + 2 * beat + 1.0


def record_received(app, request) -> None:
    """``task_received`` handler (the worker's main process): the task is with this worker."""
    meta = {
        "hostname": request.hostname,
        "pid": os.getpid(),
        "beat_s": celery_settings.heartbeat_seconds(),
        "lease_s": celery_settings.lease_seconds(),
    }
    try:
        app.backend.store_result(request.id, meta, RECEIVED)
    except Exception:  # the executor then sees PENDING until the task starts; never drop it
        log.exception("could not record that task %s was received", request.id)


def kill_self(reason: str) -> None:
    """End this process and its children now (``SIGKILL``): its step belongs to no one."""
    log.error("stopping this step's process (pid %s): %s", os.getpid(), reason)
    try:
        import psutil

        children = psutil.Process().children(recursive=True)
        for child in children:
            try:
                child.kill()
            except psutil.NoSuchProcess:
                pass
    except ImportError:  # the cluster extra brings psutil; without it the children are left
        pass
    os.kill(os.getpid(), signal.SIGKILL)


class StepLease:
    """Renews a running task's lease (:mod:`pipelines.celery_step_heartbeat`) from two threads: one writes
    the beats, one (never blocked on the network) checks the lease's age, the fence and the
    parent process."""

    def __init__(self, backend, task_id: str, hostname: str) -> None:
        self.backend = backend
        self.task_id = task_id
        self.beat_s = celery_settings.heartbeat_seconds()
        self.lease_s = celery_settings.lease_seconds()
        self.meta = {"pid": os.getpid(), "hostname": hostname}
        self.meta |= {"beat_s": self.beat_s, "lease_s": self.lease_s}
        self.parent = os.getppid()
        self.renewed = time.monotonic()
        self.beats = 0
        self.stopping = threading.Event()
        self.lock = threading.Lock()  # held while a beat is written: none after stop()
        self.threads = [
            threading.Thread(target=self._renew, name="psp-step-lease", daemon=True),
            threading.Thread(target=self._watchdog, name="psp-step-watchdog", daemon=True),
        ]

    def start(self) -> StepLease:
        try:
            self._beat()  # the first beat before the step's work
        except Exception as error:  # the backend is away: the watchdog decides when to stop
            log.warning("could not take the lease of task %s: %s", self.task_id, error)
        for thread in self.threads:
            thread.start()
        return self

    def stop(self) -> None:
        """No beat after this returns (the task's result is stored next)."""
        self.stopping.set()
        with self.lock:
            pass
        for thread in self.threads:
            thread.join(timeout=1.0)

    def _expired(self) -> str | None:
        age = time.monotonic() - self.renewed
        if age > self.lease_s:
            return f"its lease was not renewed for {age:.0f} s (longer than {self.lease_s:g} s)"
        if os.getppid() != self.parent:
            return "its Celery worker's main process is gone"
        return None

    def on_resume(self, *_) -> None:
        """``SIGCONT`` handler (the step's main thread, before it runs another line of Python):
        a process paused past its lease, or fenced meanwhile (its run stopped), stops here,
        before the watchdog thread could."""
        if self.stopping.is_set():
            return
        expired = self._expired()
        if expired:
            kill_self(expired)
        try:
            reason = fenced(self.backend, self.task_id)
        except Exception:  # the backend is away: the lease decides
            return
        if reason is not None:
            kill_self(f"its task was fenced ({reason}) while it was paused")

    def _beat(self) -> None:
        with self.lock:
            if self.stopping.is_set():
                return
            expired = self._expired()
            if expired:
                kill_self(expired)
            reason = fenced(self.backend, self.task_id)
            if reason == LOST:
                kill_self("the executor declared its step lost and retried it elsewhere")
            elif reason == STOP:
                log.warning("the run was stopped: terminating step task %s", self.task_id)
                os.kill(os.getpid(), signal.SIGTERM)
            self.beats += 1
            meta = self.meta | {"beat": self.beats}
            self.backend.store_result(self.task_id, meta, "STARTED")
            self.renewed = time.monotonic()

    def _renew(self) -> None:
        while not self.stopping.wait(self.beat_s):
            try:
                self._beat()
            except Exception as error:  # the backend is away: the watchdog decides when to stop
                log.warning("could not renew the lease of task %s: %s", self.task_id, error)

    def _watchdog(self) -> None:
        while not self.stopping.wait(WATCHDOG_SECONDS):
            expired = self._expired()
            if expired and not self.stopping.is_set():
                kill_self(expired)


class LeasedTask(Task):
    """The base of the step task (``dagster_celery.tasks.create_task(app, base=LeasedTask)``):
    a fenced task does nothing; a running one holds a :class:`StepLease`."""

    def __call__(self, *args, **kwargs):
        task_id = self.request.id
        if task_id is None or self.request.is_eager:
            return super().__call__(*args, **kwargs)
        if fenced(self.backend, task_id):
            log.warning("task %s was fenced before it started: not running it", task_id)
            raise Ignore()
        lease = StepLease(self.backend, task_id, self.request.hostname or "?").start()
        previous = signal.signal(signal.SIGCONT, lease.on_resume)
        try:
            return super().__call__(*args, **kwargs)
        finally:
            signal.signal(signal.SIGCONT, previous)
            lease.stop()
