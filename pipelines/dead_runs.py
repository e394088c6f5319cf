"""Runs whose worker process died without ending them (``kill -9``, OOM killer, power loss).

Dagster marks a run finished only from inside it: a run worker killed with ``kill -9`` leaves
its run STARTED for ever, holding the concurrency slots it claimed (the ``psp_training`` pool),
so every later training waits on it. The default run launcher has no health check for the run
monitoring daemon to call, and ``dagster job execute`` runs have no launcher at all.

So every run records who executes it: :func:`record_worker` tags the run with the host, its
boot id, the worker's pid and the process's start time (``psp/worker``). :func:`fail_dead_runs`
finds STARTED/CANCELING runs whose recorded worker ran on this host and is gone (no such pid,
a pid reused by a younger process, or a reboot since), marks them failed with a message saying
so, and frees their concurrency slots. It runs when a run starts, every
:data:`POLL_SECONDS` while a run executes (``pipelines.executor``), and from the daemon's
``dead_run_sensor``; a run on another host is left to that host's runs.
"""

from __future__ import annotations

import json
import logging
import os
import socket
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

from dagster import DagsterInstance, DagsterRun, DagsterRunStatus, RunsFilter

WORKER_TAG = "psp/worker"
#: How often a running run looks for dead ones (seconds); Dagster re-checks a blocked pool
#: claim at most every 15 s, so a freed slot is taken within about POLL_SECONDS + 15 s.
POLL_SECONDS = 10.0
_BOOT_ID = Path("/proc/sys/kernel/random/boot_id")
log = logging.getLogger(__name__)


def _boot_id() -> str:
    try:
        return _BOOT_ID.read_text().strip()
    except OSError:
        return ""


def _start_ticks(pid: int) -> int | None:
    """The process's start time in clock ticks since boot (Linux), None if there is no such
    process; -1 where /proc is not available but the pid exists."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return None
    except OSError:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return None
        except PermissionError:
            pass
        return -1
    # the command name (field 2) is in parentheses and may hold spaces: split after it
    return int(stat.rsplit(")", 1)[1].split()[19])


@dataclass(frozen=True)
class WorkerIdentity:
    """Which process on which machine executes a run."""

    host: str
    boot_id: str
    pid: int
    start_ticks: int

    @classmethod
    def current(cls) -> WorkerIdentity:
        pid = os.getpid()
        return cls(socket.gethostname(), _boot_id(), pid, _start_ticks(pid) or -1)

    @classmethod
    def from_tag(cls, value: str) -> WorkerIdentity | None:
        try:
            data = json.loads(value)
            return cls(
                str(data["host"]), str(data["boot_id"]), int(data["pid"]), int(data["start_ticks"])
            )
        except (ValueError, KeyError, TypeError):
            return None

    def tag(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)

    def on_this_host(self) -> bool:
        return self.host == socket.gethostname()

    def is_gone(self) -> bool:
        """True when this host's process is certainly gone (call only when on this host)."""
        if self.boot_id and self.boot_id != _boot_id():
            return True  # the machine rebooted since: every process of that boot is gone
        ticks = _start_ticks(self.pid)
        if ticks is None:
            return True
        # a live pid that started at another time is a different process reusing the number
        return ticks != -1 and self.start_ticks != -1 and ticks != self.start_ticks


def record_worker(instance: DagsterInstance, run_id: str) -> WorkerIdentity:
    """Tag ``run_id`` with the identity of the calling process (its run worker)."""
    worker = WorkerIdentity.current()
    instance.add_run_tags(run_id, {WORKER_TAG: worker.tag()})
    return worker


def find_dead_runs(instance: DagsterInstance) -> list[tuple[DagsterRun, WorkerIdentity]]:
    """Unfinished runs whose recorded worker ran on this host and is gone."""
    runs = instance.get_runs(
        filters=RunsFilter(statuses=[DagsterRunStatus.STARTED, DagsterRunStatus.CANCELING])
    )
    dead = []
    for run in runs:
        worker = WorkerIdentity.from_tag(run.tags.get(WORKER_TAG, ""))
        if worker is not None and worker.on_this_host() and worker.is_gone():
            dead.append((run, worker))
    return dead


def fail_dead_runs(
    instance: DagsterInstance, report: Callable[[str], None] | None = None
) -> list[str]:
    """Mark the runs of :func:`find_dead_runs` failed and free their concurrency slots.

    Returns the run ids it failed; ``report`` (e.g. ``context.log.warning``) hears one line each.
    """
    failed = []
    for run, worker in find_dead_runs(instance):
        current = instance.get_run_by_id(run.run_id)
        if current is None or current.status not in (
            DagsterRunStatus.STARTED,
            DagsterRunStatus.CANCELING,
        ):
            continue  # another process got there first
        message = (
            f"run {run.run_id} ({run.job_name}, partition "
            f"{run.tags.get('dagster/partition', '-')}): its worker process {worker.pid} on "
            f"{worker.host} is gone (killed?); marked failed and its concurrency slots freed. "
            "Re-run it: finished stages are reused and training resumes from its checkpoint."
        )
        instance.report_run_failed(current, message=message)
        if instance.event_log_storage.supports_global_concurrency_limits:
            instance.event_log_storage.free_concurrency_slots_for_run(run.run_id)
        failed.append(run.run_id)
        (report or log.warning)(message)
    return failed
