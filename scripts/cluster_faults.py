"""Partial failures of the cluster, run by ``scripts/cluster_e2e.py`` on its real services
(PostgreSQL, Redis, Celery workers, the daemon): each fault on a run of its own of one language
(the smoke profile) whose training step (``psp_model``) is made to train again (its output
removed, every stage before it reused; 200 epochs) so that the fault lands on a real training.
Each returns an object with ``ok`` and what was seen:

* ``restart_same_name``: the worker training is killed and restarted at once under the same
  name (it answers pings while its old task is gone); the other workers are paused, so the retry
  and every later step run on the restarted worker;
* ``stop_with_dead_worker``: the worker training is killed (then, on another run, paused), and
  the run is stopped: it must end (CANCELED) within 60 s with no process of it left (the paused
  step's process stops itself once resumed);
* ``paused_worker``: ``SIGSTOP`` to the training worker's main process alone, past a lost
  step's silence (its pool process trains on: no retry), then to a whole worker (the step is
  retried elsewhere; resumed, the paused copy must stop at once, never training beside the retry);
* ``pool_process_killed``: ``kill -9`` of the pool process alone;
* ``killed_before_started``: a worker that waits between accepting a task and starting it
  (``tests/pipelines/slow_start_worker.py``) is killed in that window;
* ``broker_restart``: Redis (durable: an append-only file) restarted under the training;
* ``disk_full``: the run's storage is a small tmpfs, filled under the training: the run fails
  with a clear error, and once space is freed the same run finishes with no temporary left.
  (Mounting needs root: elsewhere it is skipped, saying so.)
"""

from __future__ import annotations

import json
import secrets
import shutil
import subprocess
import time
from pathlib import Path

import cluster_services as cs
from cluster_runs import (
    TRAINING_STEP,
    instance,
    overlap_ok,
    retried_steps,
    retries,
    runs_of,
    step_attempts,
    training_windows,
    wait_for_runs,
)

from tests.psp_core.filesystems import fill_up

LANG = "de"
FIRST_STEP = "raw_pairs"  # the first step of a language run
STOP_WITHIN_S = 60
# the smoke profile trains an epoch in a fraction of a second: 200 epochs for a fault to land in
TRAINING_EPOCHS = 200
INPUTS_LOADED_S = 2.0  # from the step's start on its worker to its training (inputs loaded)


class FaultRuns:
    """Runs of ``LANG`` on the fault storage root, launched through the daemon."""

    def __init__(self, cluster, job: str, timeout: float, lost_after: float) -> None:
        self.cluster = cluster
        self.job = job
        self.timeout = timeout
        self.lost_after = (
            lost_after  # a lost step's silence (pipelines.celery_step_heartbeat.lost_after)
        )
        self.root = cluster.work / "fault-storage"
        self.runs: list = []

    def launch(self, name: str, root: Path | None = None, retrain: bool = True):
        root = root or self.root
        if retrain:
            shutil.rmtree(root / LANG / TRAINING_STEP, ignore_errors=True)
        tag = {"psp/fault": f"{name}-{secrets.token_hex(3)}"}
        config = {
            "resources": {"storage": {"config": {"root": str(root)}}},
            "ops": {TRAINING_STEP: {"config": {"epochs": TRAINING_EPOCHS}}},
        }
        self.cluster.dagster(
            "job", "launch", "-w", str(self.cluster.workspace), "-j", self.job,
            "--tags", json.dumps({"dagster/partition": LANG, **tag}),
            "--config-json", json.dumps(config),
        )  # fmt: skip
        cs.wait_for(lambda: bool(runs_of(tag)), f"the run of {name}", 60)
        run = runs_of(tag)[0]
        self.runs.append(run)
        return run

    def finish(self, run, timeout: float | None = None):
        """``run`` once it has ended."""
        tag = {"psp/fault": run.tags["psp/fault"]}
        return wait_for_runs(tag, 1, timeout or self.timeout)[0]

    def training_on(self, run, attempt: int = 1, settle: float = INPUTS_LOADED_S) -> str:
        """The worker (name) running the ``attempt``-th try of the training step, once it runs
        (``settle`` seconds after it started: training, its inputs loaded)."""

        def started() -> list:
            return [w for s, w, _ in step_attempts(run) if s == TRAINING_STEP]

        cs.wait_for(lambda: len(started()) >= attempt, "the training step", self.timeout)
        time.sleep(settle)
        return started()[attempt - 1].split("@")[0]

    def pool_pid(self, worker: str) -> int:
        import psutil

        children = psutil.Process(self.cluster.services.started[worker].pid).children()
        return children[0].pid


def _outcome(runs: FaultRuns, run) -> dict:
    run = runs.finish(run)
    workers = [f"{s}@{w.split('@')[0]}" for s, w, _ in step_attempts(run)]
    why = [message.strip() for _, message in retries(run)]
    seen = {"status": run.status.value, "retried": retried_steps(run), "steps_on": workers}
    return seen | {"retried_because": why}


def restart_same_name(runs: FaultRuns) -> dict:
    cluster = runs.cluster
    run = runs.launch("restart_same_name")
    victim = runs.training_on(run)
    others = [name for name in cluster.workers() if name != victim]
    cluster.services.kill(victim)
    cluster.start_worker(victim)  # answers pings before its old task could be judged lost
    for name in others:  # idle (a language's run is a chain): the retry can only go to victim
        cluster.services.pause(name, whole_group=True)
    try:
        seen = _outcome(runs, run)
    finally:
        for name in others:
            cluster.services.resume(name, whole_group=True)
    after_kill = seen["steps_on"][seen["steps_on"].index(f"{TRAINING_STEP}@{victim}") + 1 :]
    seen |= {"worker": victim, "steps_after_restart": after_kill}
    seen["ok"] = (
        seen["status"] == "SUCCESS"
        and seen["retried"] == [TRAINING_STEP]
        and bool(after_kill)
        and all(step.endswith(f"@{victim}") for step in after_kill)
    )
    return seen


def stop_with_dead_worker(runs: FaultRuns) -> dict:
    """Stop a run while the worker training is dead, then while it is paused (whole group)."""
    dead = _stop_under(runs, "dead")
    paused = _stop_under(runs, "paused")
    return {"ok": dead["ok"] and paused["ok"], "dead": dead, "paused": paused}


def _stop_under(runs: FaultRuns, how: str) -> dict:
    cluster = runs.cluster
    run = runs.launch(f"stop_with_{how}_worker")
    victim = runs.training_on(run)
    copy = runs.pool_pid(victim)
    if how == "dead":
        cluster.services.kill(victim)
    else:
        cluster.services.pause(victim, whole_group=True)
    time.sleep(2.0)
    stopped = time.monotonic()
    with instance() as dagster:
        dagster.run_coordinator.cancel_run(run.run_id)
    try:
        run = runs.finish(run, timeout=STOP_WITHIN_S + 30)
        ended_s = round(time.monotonic() - stopped, 1)
        slot_free = _training_slot_free_within(5.0)
    finally:
        if how == "dead":
            cluster.start_worker(victim)
        else:
            cluster.services.resume(victim, whole_group=True)
    resumed = time.monotonic()
    while cs.alive(copy) and time.monotonic() - resumed < 10:
        time.sleep(0.05)
    left = _processes_mentioning(run.run_id)
    return {
        "ok": run.status.value == "CANCELED"
        and ended_s <= STOP_WITHIN_S
        and slot_free
        and not left
        and not cs.alive(copy),
        "worker": victim,
        "status": run.status.value,
        "ended_after_s": ended_s,
        "training_slot_free_after_end": slot_free,
        "step_process_left": cs.alive(copy),
        "run_processes_left": left,
    }


def _training_slot_free_within(seconds: float) -> bool:
    """Whether the ``psp_training`` pool has no slot taken within ``seconds`` (the stopped run's
    slot freed at once, not by Dagster's run monitoring half a minute later)."""
    deadline = time.monotonic() + seconds
    while True:
        with instance() as dagster:
            info = dagster.event_log_storage.get_concurrency_info("psp_training")
        if info.active_slot_count == 0:
            return True
        if time.monotonic() > deadline:
            return False
        time.sleep(0.2)


def _processes_mentioning(text: str) -> list[str]:
    listing = subprocess.run(["ps", "-eo", "pid=,args="], capture_output=True, text=True).stdout
    return [line.strip()[:160] for line in listing.splitlines() if text in line]


def paused_worker(runs: FaultRuns) -> dict:
    cluster = runs.cluster
    pause_s = runs.lost_after + 3
    # the main process alone: its pool process trains on and reports; nothing is lost
    run = runs.launch("paused_main_process")
    victim = runs.training_on(run)
    cluster.services.pause(victim, whole_group=False)
    time.sleep(pause_s)
    cluster.services.resume(victim, whole_group=False)
    main_only = _outcome(runs, run) | {"worker": victim, "paused_s": pause_s}
    main_only["ok"] = main_only["status"] == "SUCCESS" and not main_only["retried"]

    # the whole worker: the step is retried elsewhere; resumed, the paused copy stops at once
    run = runs.launch("paused_worker")
    victim = runs.training_on(run)
    copy = runs.pool_pid(victim)
    cluster.services.pause(victim, whole_group=True)
    paused_at = time.monotonic()
    try:
        retry_on = runs.training_on(run, attempt=2, settle=0.0)
        retry_after_s = round(time.monotonic() - paused_at, 1)
        time.sleep(2.0)  # the retry trains while the paused copy is stopped
    finally:
        cluster.services.resume(victim, whole_group=True)
    resumed = time.monotonic()
    while cs.alive(copy) and time.monotonic() - resumed < 10:
        time.sleep(0.02)
    copy_stopped_s = round(time.monotonic() - resumed, 2)
    whole = _outcome(runs, run) | {"worker": victim, "retry_on": retry_on}
    whole |= {"retry_after_s": retry_after_s, "paused_copy_stopped_after_resume_s": copy_stopped_s}
    materializations = _training_materializations(run)
    whole["training_materializations"] = materializations
    whole["ok"] = (
        whole["status"] == "SUCCESS"
        and whole["retried"] == [TRAINING_STEP]
        and retry_on != victim
        and not cs.alive(copy)
        and copy_stopped_s < 2.0
        and materializations == 1
    )
    return {"ok": main_only["ok"] and whole["ok"], "main_process": main_only, "whole_group": whole}


def _training_materializations(run) -> int:
    from dagster import AssetKey

    with instance() as dagster:
        records = dagster.get_records_for_run(run.run_id).records
    return sum(
        1
        for r in records
        if r.event_log_entry.asset_materialization
        and r.event_log_entry.asset_materialization.asset_key == AssetKey(TRAINING_STEP)
    )


def pool_process_killed(runs: FaultRuns) -> dict:
    run = runs.launch("pool_process_killed")
    victim = runs.training_on(run)
    pid = runs.pool_pid(victim)
    subprocess.run(["kill", "-9", str(pid)], check=True)
    seen = _outcome(runs, run) | {"worker": victim, "killed_pid": pid}
    seen["ok"] = seen["status"] == "SUCCESS" and seen["retried"] == [TRAINING_STEP]
    return seen


def killed_before_started(runs: FaultRuns) -> dict:
    cluster = runs.cluster
    marker = cluster.work / "accepted"
    marker.unlink(missing_ok=True)
    others = cluster.workers()
    for name in others:  # idle: the run's first step can only go to the slow worker
        cluster.services.pause(name, whole_group=True)
    try:
        cluster.start_worker(
            "slow-1",
            app="tests.pipelines.slow_start_worker",
            PSP_TEST_START_DELAY="120",
            PSP_TEST_ACCEPTED_MARKER=str(marker),
            # the run's first step: a run the daemon's automation launched meanwhile (the
            # scoreboard, after the last fault's evaluation) runs at once, not in the window
            PSP_TEST_DELAY_STEPS=FIRST_STEP,
        )
        run = runs.launch("killed_before_started")
        cs.wait_for(marker.exists, "the slow worker to accept a step", runs.timeout)
        cluster.services.kill("slow-1")
    finally:
        for name in others:
            cluster.services.resume(name, whole_group=True)
    seen = _outcome(runs, run)
    seen["ok"] = (
        seen["status"] == "SUCCESS"
        and seen["retried"] == [FIRST_STEP]
        and "slow-1" in " ".join(seen["retried_because"])
    )
    return seen


def broker_restart(runs: FaultRuns) -> dict:
    run = runs.launch("broker_restart")
    victim = runs.training_on(run)
    away_s = round(runs.cluster.restart_redis(), 1)
    seen = _outcome(runs, run) | {"worker": victim, "redis_away_s": away_s}
    seen["ok"] = seen["status"] == "SUCCESS"
    return seen


def disk_full(runs: FaultRuns, size_mib: int = 256) -> dict:
    """The run's storage on a ``size_mib`` tmpfs, filled under the training."""
    mountpoint = runs.cluster.work / "full-storage"
    mountpoint.mkdir(exist_ok=True)
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size_mib}m", "tmpfs", str(mountpoint)],
        capture_output=True,
        text=True,
    )
    if mounted.returncode != 0:
        reason = mounted.stderr.strip() or "mount failed"
        return {"ok": True, "skipped": f"cannot mount a tmpfs here (needs root): {reason}"}
    filler = mountpoint / "filler"  # fill_up's
    try:
        shutil.copytree(runs.root, mountpoint / "root", symlinks=True)  # everything but training
        root = mountpoint / "root"
        run = runs.launch("disk_full", root=root)
        runs.training_on(run)
        filler = fill_up(mountpoint)
        full = _outcome(runs, run)
        full["error"] = _failure_message(run)
        filler.unlink()
        again = _outcome(runs, runs.launch("disk_full_again", root=root, retrain=False))
        left = sorted(str(p.relative_to(root)) for p in root.rglob("*") if ".tmp-" in p.name)
        return {
            "ok": full["status"] == "FAILURE"
            and "No space left on device" in full["error"]
            and again["status"] == "SUCCESS"
            and not left,
            "full": full,
            "after_freeing": again,
            "temporaries_left": left,
        }
    finally:
        filler.unlink(missing_ok=True)
        subprocess.run(["umount", "-l", str(mountpoint)], check=False)


def _failure_message(run) -> str:
    from dagster import DagsterEventType

    with instance() as dagster:
        records = dagster.get_records_for_run(
            run.run_id, of_type={DagsterEventType.STEP_FAILURE, DagsterEventType.RUN_FAILURE}
        ).records
    messages = []
    for record in records:
        event = record.event_log_entry.dagster_event
        error = getattr(event.event_specific_data, "error", None)
        messages.append(f"{event.message or ''} {error.to_string() if error else ''}")
    return " | ".join(messages)[-2000:]


FAULTS = {
    "restart_same_name": restart_same_name,
    "stop_with_dead_worker": stop_with_dead_worker,
    "paused_worker": paused_worker,
    "pool_process_killed": pool_process_killed,
    "killed_before_started": killed_before_started,
    "broker_restart": broker_restart,
    "disk_full": disk_full,
}


def run_faults(cluster, job: str, timeout: float, lost_after: float, names=None) -> dict:
    """Each fault of :data:`FAULTS` (or ``names``) in turn, after one run that fills the fault
    storage root; a fault that raised is ``ok: false`` with its error. Also
    ``training_overlap_ok`` over every run here: never two trainings at once."""
    runs = FaultRuns(cluster, job, timeout, lost_after)
    summary: dict = {}
    first = runs.finish(runs.launch("setup", retrain=False))
    summary["setup"] = {"ok": first.status.value == "SUCCESS", "status": first.status.value}
    if not summary["setup"]["ok"]:
        return summary
    for name in names or FAULTS:
        started = time.monotonic()
        try:
            summary[name] = FAULTS[name](runs)
        except Exception as error:
            summary[name] = {"ok": False, "error": f"{type(error).__name__}: {error}"}
        summary[name]["elapsed_s"] = round(time.monotonic() - started, 1)
        print(f"fault {name}: {json.dumps(summary[name])}", flush=True)
    windows = training_windows(runs.runs, by_run=True)
    # a run that reused a training reports that training's window again: count each once
    distinct = {f"{start}-{end}": [start, end] for start, end in windows.values()}
    summary["training_windows"] = len(distinct)
    summary["training_overlap_ok"] = overlap_ok(distinct)
    return summary
