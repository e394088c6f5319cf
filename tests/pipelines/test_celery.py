"""Steps on real Celery workers under partial failures (issues 15 and 28): a Redis broker on
127.0.0.1 and Celery workers (``celery -A pipelines.celery_worker``), each in a working directory
of its own; a real ``dagster job execute`` sends its steps to them. Each test breaks a worker in
one way real clusters do while it holds ``long_step`` (``tests/pipelines/celery_jobs.py``):

* killed whole (``kill -9`` of its process group: no one reports) or only its pool process
  (Celery reports ``WorkerLostError``): the step is retried on a live worker;
* only its main process killed: the orphaned pool process stops itself, the step is retried;
* killed and restarted at once under the same name: the retry runs there;
* killed, then the run stopped: the run ends in bounded time;
* its main process paused (the pool process runs on): the step finishes there, no retry;
* its whole process group paused past the lease: the step is retried elsewhere and the paused
  copy, resumed, stops itself before another line of the step runs (no two copies overlap);
* killed between accepting the task and starting it: the step is retried.

The lease settings are short here (beat 0.5 s, lease 2 s: a lost step noticed after about 4 s).
Skipped, with a message, without Debian's ``redis-server`` or dagster-celery (the ``cluster``
extra). The whole cluster (PostgreSQL, the daemon, a backfill) is ``scripts/cluster_e2e.py``'s.
"""

from __future__ import annotations

import functools
import importlib.util
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "scripts"))
import cluster_services as cs  # noqa: E402  (scripts/cluster_services.py)

pytestmark = [
    pytest.mark.skipif(
        shutil.which("redis-server") is None,
        reason="redis-server is not installed (apt-get install redis-server)",
    ),
    pytest.mark.skipif(
        importlib.util.find_spec("dagster_celery") is None,
        reason="dagster-celery is not installed (pip install -e '.[cluster]')",
    ),
]

LOST_AFTER = 2 + 2 * 0.5 + 1  # pipelines.celery_step_heartbeat.lost_after with the settings below


class Cluster:
    """Redis, workers started on demand, and one ``dagster job execute`` of ``lost_worker_job``."""

    def __init__(self, tmp_path: Path, services: cs.Services, env: dict) -> None:
        self.tmp = tmp_path
        self.services = services
        self.env = env
        self.attempts = tmp_path / "attempts"
        self.log = tmp_path / "run.log"
        self.run: subprocess.Popen | None = None

    def worker(
        self,
        *names: str,
        app: str = "pipelines.celery_worker",
        and_run: bool = False,
        **env: str,
    ) -> None:
        """Start the workers ``names`` side by side (``and_run``: and the run, whose steps wait
        in the queue meanwhile), then wait until each answers a ping on the broker."""
        for name in names:
            extra = self.env | {"PSP_TEST_WORKER": name} | env
            cs.start_worker(self.services, name, extra, self.tmp, app=app)
        if and_run:
            self.start_run()
        for name in names:
            host = f"{name}@{socket.gethostname()}"
            cs.wait_for(
                lambda host=host: bool(self.celery_app.control.ping([host], timeout=1.0)),
                name,
                120,
                interval=0.2,
            )

    @functools.cached_property
    def celery_app(self):
        """A Celery app with the workers' settings and broker, in this process: pings cost no
        interpreter of their own."""
        from dagster_celery.executor import CeleryExecutor
        from dagster_celery.make_app import make_app

        from pipelines import celery_settings

        broker = self.env["PSP_CELERY_BROKER"]
        executor = CeleryExecutor.for_cli(
            broker=broker, backend=broker, config_source=celery_settings.config_source()
        )
        return make_app(executor.app_args())

    def close(self) -> None:
        if "celery_app" in self.__dict__:
            self.celery_app.close()

    def start_run(self) -> None:
        config = self.tmp / "run.yaml"
        config.write_text(yaml.safe_dump({"execution": {"config": {"stop_wait_seconds": 10.0}}}))
        command = [str(cs.BIN / "dagster"), "job", "execute", "-m", "tests.pipelines.celery_jobs"]
        command += ["-j", "lost_worker_job", "-c", str(config)]
        with open(self.log, "wb") as handle:
            self.run = subprocess.Popen(
                command, cwd=ROOT, env=self.env, stdout=handle, stderr=subprocess.STDOUT
            )

    def attempt(self, number: int, timeout: float = 120) -> dict:
        path = self.attempts / f"attempt-{number}.json"
        cs.wait_for(path.exists, f"attempt {number} of long_step", timeout)
        time.sleep(0.05)  # written in one call, but not atomically
        return json.loads(path.read_text())

    def output(self) -> str:
        return self.log.read_text()

    def finish(self, timeout: float = 120) -> int:
        try:
            return self.run.wait(timeout)
        except subprocess.TimeoutExpired:
            self.run.kill()
            pytest.fail(f"the run did not end in {timeout} s:\n{self.output()[-4000:]}")


@pytest.fixture
def cluster(tmp_path):
    services = cs.Services(tmp_path)
    port = cs.free_port()
    home = tmp_path / "home"
    home.mkdir()
    shutil.copy(ROOT / "configs" / "dagster.yaml", home / "dagster.yaml")
    env = os.environ | {
        "DAGSTER_HOME": str(home),
        "PSP_CELERY_BROKER": f"redis://127.0.0.1:{port}/0",
        "PSP_TEST_ATTEMPTS": str(tmp_path / "attempts"),
        "PSP_STEP_HEARTBEAT_SECONDS": "0.5",
        "PSP_STEP_LEASE_SECONDS": "2",
        "PYTHONPATH": str(ROOT),
    }
    (tmp_path / "attempts").mkdir()
    handle = Cluster(tmp_path, services, env)
    try:
        cs.start_redis(services, tmp_path / "redis", port)
        yield handle
    finally:
        if handle.run is not None and handle.run.poll() is None:
            handle.run.kill()
        handle.close()
        for name in reversed(list(services.started)):  # nothing here needs a clean shutdown
            services.kill(name)
        assert services.left_running() == []


def _retried_once_and_succeeded(cluster: Cluster, *reasons: str) -> None:
    output = cluster.output()
    assert "STEP_UP_FOR_RETRY" in output and 'step "long_step" was lost' in output
    assert any(reason in output for reason in reasons), reasons
    assert "RUN_SUCCESS" in output
    assert not (cluster.attempts / "attempt-3.json").exists()  # retried once, not twice


def test_a_pool_process_whose_worker_died_stops_itself(cluster):
    """``kill -9`` of the worker's main process alone: its pool process (non-daemonic, so that
    steps may start processes) would train on unwatched beside the retry; it stops itself."""
    cluster.worker("worker-1", "worker-2", and_run=True)
    victim = cluster.attempt(1)
    os.kill(cluster.services.started[victim["worker"]].pid, signal.SIGKILL)
    cs.wait_for(lambda: not cs.alive(victim["pid"]), "the orphaned pool process to stop", 5)
    assert cluster.finish() == 0, cluster.output()[-4000:]
    assert cluster.attempt(2)["worker"] != victim["worker"]
    _retried_once_and_succeeded(cluster, "stopped renewing its lease")


def test_a_step_whose_pool_process_is_killed_is_retried_on_a_live_worker(cluster):
    """Only the process running the step, as the OOM killer would. (A whole worker killed is
    the restart test's first half and the main-process test's lease path, and the cluster
    e2e's worker kill.)"""
    cluster.worker("worker-1", "worker-2", and_run=True)
    victim = cluster.attempt(1)
    os.kill(victim["pid"], signal.SIGKILL)
    assert cluster.finish() == 0, cluster.output()[-4000:]
    # Celery reports it after worker_lost_wait (10 s): the lease may tell first
    _retried_once_and_succeeded(cluster, "process died", "stopped renewing its lease")
    assert cluster.attempt(2)["pid"] != victim["pid"]


def test_a_worker_restarted_under_the_same_name_runs_the_retry(cluster):
    """One worker, killed and restarted at once under its name: the retry can only run on the
    restarted one. Per-host pings never noticed the loss (the name answers again) and waited for
    ever; here the old task's lease is not renewed, whoever answers to its worker's name."""
    cluster.worker("worker-1", and_run=True)
    cluster.attempt(1)
    cluster.services.kill("worker-1")
    cluster.worker("worker-1")
    assert cluster.finish() == 0, cluster.output()[-4000:]
    second = cluster.attempt(2)
    assert second["worker"] == "worker-1"
    _retried_once_and_succeeded(cluster, "stopped renewing its lease")


def test_stopping_a_run_whose_worker_is_dead_ends_it(cluster):
    cluster.worker("worker-1", and_run=True)
    cluster.attempt(1)
    cluster.services.kill("worker-1")
    time.sleep(1.0)
    stopped = time.monotonic()
    cluster.run.send_signal(signal.SIGINT)  # Ctrl-C: Dagster's interrupt, the run is stopped
    cluster.finish(timeout=60)
    elapsed = time.monotonic() - stopped
    output = cluster.output()
    assert "received termination signal" in output
    assert "RUN_SUCCESS" not in output
    assert elapsed < 30, f"the stopped run took {elapsed:.0f} s to end"


def test_a_worker_whose_main_process_is_paused_finishes_its_step(cluster):
    """SIGSTOP to the worker's main process alone, longer than a lost step's silence: its pool
    process runs on, renewing the step's lease, and reports the result itself."""
    cluster.env["PSP_TEST_FIRST_ATTEMPT_SECONDS"] = str(LOST_AFTER + 4)
    cluster.worker("worker-1", "worker-2", and_run=True)
    first = cluster.attempt(1)
    cluster.services.pause(first["worker"], whole_group=False)
    time.sleep(LOST_AFTER + 2)
    cluster.services.resume(first["worker"], whole_group=False)
    assert cluster.finish() == 0, cluster.output()[-4000:]
    output = cluster.output()
    assert "STEP_UP_FOR_RETRY" not in output and "RUN_SUCCESS" in output
    assert not (cluster.attempts / "attempt-2.json").exists()


def test_a_paused_worker_never_runs_beside_the_retry_of_its_step(cluster):
    """SIGSTOP to the worker's whole process group past the lease: the step is retried on the
    other worker; resumed (SIGCONT), the paused copy stops itself before it stamps again."""
    cluster.worker("worker-1", "worker-2", and_run=True)
    first = cluster.attempt(1)
    cluster.services.pause(first["worker"], whole_group=True)
    second = cluster.attempt(2, timeout=60)
    assert second["worker"] != first["worker"]
    time.sleep(1.0)
    cluster.services.resume(first["worker"], whole_group=True)
    cs.wait_for(lambda: not cs.alive(first["pid"]), "the paused copy to stop", 10)
    assert cluster.finish() == 0, cluster.output()[-4000:]
    last_stamp = float((cluster.attempts / "attempt-1.alive").read_text())
    assert last_stamp < second["started"], "the paused copy ran after its retry had started"
    _retried_once_and_succeeded(cluster, "stopped renewing its lease")


def test_a_worker_killed_before_it_started_the_step_loses_it_to_a_live_one(cluster):
    """A worker that accepted the task (and acknowledged it to the broker) is killed before the
    task is STARTED: neither queued nor running, the step must still be retried."""
    accepted = cluster.tmp / "accepted"
    cluster.worker(
        "slow-1",
        app="tests.pipelines.slow_start_worker",
        PSP_TEST_START_DELAY="60",
        PSP_TEST_ACCEPTED_MARKER=str(accepted),
        PSP_TEST_DELAY_STEPS="long_step",  # the step keys read from the task, as the e2e does
    )
    cluster.start_run()
    cs.wait_for(accepted.exists, "the slow worker to accept long_step", 120)
    cluster.services.kill("slow-1")
    cluster.env["PSP_TEST_FIRST_ATTEMPT_SECONDS"] = "0"
    cluster.worker("worker-2")
    assert cluster.finish() == 0, cluster.output()[-4000:]
    assert cluster.attempt(1)["worker"] == "worker-2"
    output = cluster.output()
    assert "STEP_UP_FOR_RETRY" in output and "received it, then stopped answering" in output
