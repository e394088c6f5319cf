"""A run killed with ``kill -9`` while it trains never blocks the next run.

Real ``dagster job execute`` processes on a SQLite ``DAGSTER_HOME`` with this repo's
``dagster.yaml`` (the ``psp_training`` pool, limit 1), against the loopback OPUS server.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from dagster import DagsterInstance, DagsterRunStatus, SkipReason, build_sensor_context

from pipelines.dead_runs import WORKER_TAG, WorkerIdentity, fail_dead_runs
from pipelines.sensors import dead_run_sensor
from tests.ops.opus_server import OpusServer, build_moses_zip
from tests.pipelines.corpora import publish_de
from tests.pipelines.dagster_cli import (
    Runs,
    alive,
    children,
    cmdline,
    dagster_env,
    tail,
    wait_for,
    write_config,
)


def test_worker_identity_tells_live_dead_and_reused_pids() -> None:
    me = WorkerIdentity.current()
    assert me.on_this_host() and not me.is_gone()
    assert WorkerIdentity.from_tag(me.tag()) == me
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    assert WorkerIdentity(me.host, me.boot_id, child.pid, me.start_ticks).is_gone()
    # this pid alive, but started at another time: a reused number, so the worker is gone
    assert WorkerIdentity(me.host, me.boot_id, me.pid, me.start_ticks + 1).is_gone()
    assert WorkerIdentity(me.host, "another-boot", me.pid, me.start_ticks).is_gone()
    assert WorkerIdentity.from_tag("not json") is None


@pytest.fixture
def three_runs(tmp_path):
    """An instance with three STARTED runs: a dead worker here (holding a psp_training slot), a
    live one here, and a dead pid recorded on another host."""
    instance = DagsterInstance.local_temp(str(tmp_path))
    instance.event_log_storage.set_concurrency_slots("psp_training", 1)
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    me = WorkerIdentity.current()
    workers = {
        "dead": WorkerIdentity(me.host, me.boot_id, child.pid, 1),
        "alive": me,
        "elsewhere": WorkerIdentity("another-host", "x", child.pid, 1),
    }
    runs = {}
    for name, worker in workers.items():
        run = instance.create_run_for_job(
            job_def=_noop_job(), run_id=None, tags={WORKER_TAG: worker.tag()}
        )
        instance.handle_new_event(_run_started_event(run))
        runs[name] = run.run_id
    claim = instance.event_log_storage.claim_concurrency_slot("psp_training", runs["dead"], "s")
    assert claim.is_claimed
    yield instance, runs, child.pid
    instance.dispose()


def _statuses(instance, runs) -> dict[str, DagsterRunStatus]:
    return {name: instance.get_run_by_id(run_id).status for name, run_id in runs.items()}


def test_fail_dead_runs_fails_only_dead_local_runs_and_frees_their_slots(three_runs) -> None:
    instance, runs, dead_pid = three_runs
    heard: list[str] = []
    assert fail_dead_runs(instance, heard.append) == [runs["dead"]]
    assert _statuses(instance, runs) == {
        "dead": DagsterRunStatus.FAILURE,
        "alive": DagsterRunStatus.STARTED,
        "elsewhere": DagsterRunStatus.STARTED,
    }
    assert len(heard) == 1 and f"worker process {dead_pid}" in heard[0]
    info = instance.event_log_storage.get_concurrency_info("psp_training")
    assert info.claimed_slots == []
    assert fail_dead_runs(instance) == []  # once is enough


def test_dead_run_sensor_fails_dead_runs_without_requesting_any(three_runs) -> None:
    instance, runs, _ = three_runs
    result = dead_run_sensor(build_sensor_context(instance=instance))
    assert isinstance(result, SkipReason) and runs["dead"] in result.skip_message
    assert _statuses(instance, runs)["dead"] == DagsterRunStatus.FAILURE
    result = dead_run_sensor(build_sensor_context(instance=instance))
    assert result.skip_message == "no dead runs"


def _noop_job():
    from dagster import job, op

    @op
    def nothing() -> None:
        pass

    @job
    def noop() -> None:
        nothing()

    return noop


def _run_started_event(run):
    from dagster import EventLogEntry
    from dagster._core.events import DagsterEvent, DagsterEventType

    event = DagsterEvent(DagsterEventType.RUN_START.value, job_name=run.job_name)
    return EventLogEntry(
        error_info=None,
        level="INFO",
        user_message="",
        run_id=run.run_id,
        timestamp=time.time(),
        dagster_event=event,
    )


# --- the real thing: dagster job execute, kill -9 ------------------------------------------


@pytest.mark.slow
def test_kill_9_during_training_does_not_block_the_next_run(
    tmp_path, monkeypatch, warm_runs
) -> None:
    server = OpusServer().start()
    try:
        publish_de(server, build_moses_zip)
        env = dagster_env(tmp_path, server)
        home, storage = Path(env["DAGSTER_HOME"]), Path(env["PSP_STORAGE_ROOT"])
        logs = [tmp_path / f"{name}.log" for name in ("prepare", "a", "b")]
        quick = write_config(tmp_path / "smoke.yaml", "smoke.yaml", epochs=1, in_process=True)
        quick_train = write_config(
            tmp_path / "smoke-train.yaml", "smoke.yaml", epochs=1, in_process=True
        )
        endless = write_config(
            tmp_path / "endless.yaml", "smoke.yaml", epochs=100_000, in_process=False
        )
        with Runs(warm_runs) as runs:
            prepare = runs.execute("psp_language_job", quick, env, logs[0])
            assert prepare.wait(timeout=300) == 0, tail(logs[0])

            # run A trains "for ever" in a step process of its own
            run_a = runs.execute("train_evaluate_job", endless, env, logs[1])
            monkeypatch.setenv("DAGSTER_HOME", str(home))  # dagster.yaml reads it
            instance = DagsterInstance.from_config(str(home))

            def a_trains() -> bool:
                assert run_a.poll() is None, tail(logs[1])
                claimed = instance.event_log_storage.get_concurrency_info("psp_training")
                checkpoints = (storage / "de" / "psp_model").glob("checkpoint-*")
                return bool(claimed.claimed_slots) and any(checkpoints)

            wait_for(a_trains, 120, "run A to hold the training slot and checkpoint", logs)
            steps = [p for p in children(run_a.pid) if "spawn_main" in cmdline(p)]
            assert len(steps) == 1, [cmdline(p) for p in children(run_a.pid)]
            # run B waits for the slot A holds ...
            run_b = runs.execute("train_evaluate_job", quick_train, env, logs[2])
            wait_for(
                lambda: "blocked by limit for pool psp_training" in tail(logs[2], 10**6),
                120,
                "run B to wait for the training pool",
                logs,
            )
            # ... A's run worker is killed; its step process is left an orphan
            os.kill(run_a.pid, signal.SIGKILL)
            run_a.wait()
            assert run_b.wait(timeout=180) == 0, tail(logs[2])
            wait_for(lambda: not alive(steps[0]), 60, "A's orphaned step process to stop", logs)

        runs_by_id = {r.run_id: r for r in instance.get_runs()}
        statuses = sorted(r.status.value for r in runs_by_id.values())
        assert statuses == ["FAILURE", "SUCCESS", "SUCCESS"], statuses
        failed = next(r for r in runs_by_id.values() if r.status == DagsterRunStatus.FAILURE)
        assert failed.tags[WORKER_TAG]  # A recorded its worker
        # runs of dagster job execute name their language and profile, as scheduled ones do
        labels = {
            (r.tags.get("psp/language"), r.tags.get("psp/profile")) for r in runs_by_id.values()
        }
        assert labels == {("de", "smoke")}, labels
        assert instance.event_log_storage.get_concurrency_info("psp_training").claimed_slots == []
        assert "is gone (killed?)" in tail(logs[2], 10**6)
        assert (storage / "de" / "psp_model" / "model" / "config.json").is_file()
        instance.dispose()
    finally:
        server.stop()
