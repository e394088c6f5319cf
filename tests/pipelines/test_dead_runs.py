"""A run killed with ``kill -9`` while it trains never blocks the next run.

Real ``dagster job execute`` processes on a SQLite ``DAGSTER_HOME`` with this repo's
``dagster.yaml`` (the ``psp_training`` pool, limit 1), against the loopback OPUS server.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from dagster import DagsterInstance, DagsterRunStatus, SkipReason, build_sensor_context

from pipelines.dead_run_sensor import dead_run_sensor
from pipelines.dead_runs import WORKER_TAG, WorkerIdentity, fail_dead_runs
from tests.ops.opus_server import OpusServer, build_moses_zip
from tests.pipelines.corpora import publish_de, write_eval_dir

ROOT = Path(__file__).resolve().parents[2]
DAGSTER = str(Path(sys.executable).with_name("dagster"))


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


def _write_config(path: Path, profile: str, *, epochs: int, in_process: bool) -> Path:
    config = yaml.safe_load((ROOT / "configs" / profile).read_text())
    config["ops"]["psp_model"]["config"]["epochs"] = epochs
    config["execution"] = {"config": {"in_process": {}} if in_process else {"multiprocess": {}}}
    path.write_text(yaml.safe_dump(config))
    return path


def _execute(job: str, config: Path, env: dict, log: Path) -> subprocess.Popen:
    command = [DAGSTER, "job", "execute", "-m", "pipelines.definitions", "-j", job]
    command += ["--tags", json.dumps({"dagster/partition": "de"}), "-c", str(config)]
    return subprocess.Popen(
        command,
        cwd=ROOT,
        env=env,
        stdout=open(log, "wb"),  # noqa: SIM115 (the child holds it)
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )


def _wait(condition, timeout: float, what: str, logs: list[Path]) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(0.5)
    tails = "\n".join(
        f"--- {p}\n{p.read_text(errors='replace')[-3000:]}" for p in logs if p.exists()
    )
    pytest.fail(f"timed out after {timeout}s waiting for {what}\n{tails}")


def _children(pid: int) -> list[int]:
    out = subprocess.run(["ps", "-o", "pid=", "--ppid", str(pid)], capture_output=True, text=True)
    return [int(x) for x in out.stdout.split()]


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # a zombie (killed, not yet reaped by its parent) counts as gone
    state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    return state != "Z"


@pytest.mark.slow
def test_kill_9_during_training_does_not_block_the_next_run(tmp_path, monkeypatch) -> None:
    home, storage, eval_dir = tmp_path / "home", tmp_path / "storage", tmp_path / "eval"
    home.mkdir()
    shutil.copy(ROOT / "dagster.yaml", home / "dagster.yaml")
    write_eval_dir(eval_dir)
    server = OpusServer().start()
    started: list[subprocess.Popen] = []
    try:
        publish_de(server, build_moses_zip)
        env = os.environ | {
            "DAGSTER_HOME": str(home),
            "PSP_STORAGE_ROOT": str(storage),
            "PSP_OPUS_API": server.api_url,
            "PSP_EVAL_DIR": str(eval_dir),
            "PSP_DEVICE": "cpu",
            "PYTHONPATH": str(ROOT),
            "NO_PROXY": "127.0.0.1,localhost",
            "no_proxy": "127.0.0.1,localhost",
        }
        logs = [tmp_path / f"{name}.log" for name in ("prepare", "a", "b")]
        quick = _write_config(tmp_path / "quick.yaml", "quick.yaml", epochs=1, in_process=True)
        prepare = _execute("psp_language_job", quick, env, logs[0])
        started.append(prepare)
        quick_train = _write_config(
            tmp_path / "quick-train.yaml", "quick-train.yaml", epochs=1, in_process=True
        )
        assert prepare.wait(timeout=300) == 0, logs[0].read_text(errors="replace")[-3000:]

        # run A trains "for ever" in a step process of its own
        endless = _write_config(
            tmp_path / "endless.yaml", "quick-train.yaml", epochs=100_000, in_process=False
        )
        run_a = _execute("train_evaluate_job", endless, env, logs[1])
        started.append(run_a)
        monkeypatch.setenv("DAGSTER_HOME", str(home))  # dagster.yaml reads it
        instance = DagsterInstance.from_config(str(home))

        def a_trains() -> bool:
            assert run_a.poll() is None, logs[1].read_text(errors="replace")[-3000:]
            claimed = instance.event_log_storage.get_concurrency_info("psp_training")
            checkpoints = (storage / "de" / "psp_model").glob("checkpoint-*")
            return bool(claimed.claimed_slots) and any(checkpoints)

        _wait(a_trains, 120, "run A to hold the training slot and checkpoint", logs)
        steps = [p for p in _children(run_a.pid) if "spawn_main" in _cmdline(p)]
        assert len(steps) == 1, [_cmdline(p) for p in _children(run_a.pid)]
        # run B waits for the slot A holds ...
        run_b = _execute("train_evaluate_job", quick_train, env, logs[2])
        started.append(run_b)
        _wait(
            lambda: "blocked by limit for pool psp_training" in logs[2].read_text(errors="replace"),
            120,
            "run B to wait for the training pool",
            logs,
        )
        # ... A's run worker is killed; its step process is left an orphan
        os.kill(run_a.pid, signal.SIGKILL)
        run_a.wait()
        assert run_b.wait(timeout=180) == 0, logs[2].read_text(errors="replace")[-4000:]

        _wait(lambda: not _alive(steps[0]), 60, "A's orphaned step process to stop", logs)
        runs = {r.run_id: r for r in instance.get_runs()}
        statuses = sorted(r.status.value for r in runs.values())
        assert statuses == ["FAILURE", "SUCCESS", "SUCCESS"], statuses
        failed = next(r for r in runs.values() if r.status == DagsterRunStatus.FAILURE)
        assert failed.tags[WORKER_TAG]  # A recorded its worker
        assert instance.event_log_storage.get_concurrency_info("psp_training").claimed_slots == []
        assert "is gone (killed?)" in logs[2].read_text(errors="replace")
        assert (storage / "de" / "psp_model" / "model" / "config.json").is_file()
        instance.dispose()
    finally:
        for process in started:  # each started a session: its group holds its step processes
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
        server.stop()


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return ""
