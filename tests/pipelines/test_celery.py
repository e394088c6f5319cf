"""Steps on real Celery workers (issue 15): a Redis broker on 127.0.0.1 and two workers
(``celery -A pipelines.celery_worker``), each in a working directory of its own; a real
``dagster job execute`` sends its steps to them. A worker killed while it runs a step, whole
(``kill -9`` of its process group: no one reports) or only its pool process (Celery reports
``WorkerLostError``), loses the step: the executor retries it on a live worker and the run
succeeds. Skipped, with a message, without Debian's ``redis-server`` or dagster-celery (the
``cluster`` extra). The whole cluster (PostgreSQL, the daemon, a backfill of two languages) is
``scripts/cluster_e2e.py``'s."""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
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


@pytest.fixture
def cluster(tmp_path):
    """Redis and two workers; yields (services, env); stops them all."""
    services = cs.Services(tmp_path)
    port = cs.free_port()
    home = tmp_path / "home"
    home.mkdir()
    shutil.copy(ROOT / "configs" / "dagster.yaml", home / "dagster.yaml")
    env = os.environ | {
        "DAGSTER_HOME": str(home),
        "PSP_CELERY_BROKER": f"redis://127.0.0.1:{port}/0",
        "PSP_TEST_ATTEMPTS": str(tmp_path / "attempts"),
        "PYTHONPATH": str(ROOT),
    }
    (tmp_path / "attempts").mkdir()
    try:
        cs.start_redis(services, tmp_path / "redis", port)
        for name in ("worker-1", "worker-2"):
            cs.start_worker(services, name, env | {"PSP_TEST_WORKER": name}, tmp_path)
        yield services, env
    finally:
        services.stop_all()
        assert services.left_running() == []


def _wait_for_workers(env: dict, names: list[str]) -> None:
    code = (
        "import sys; from pipelines.celery_worker import app\n"
        "names = sys.argv[1:]\n"
        "replies = app.control.ping(names, timeout=1.0)\n"
        "sys.exit(0 if len({n for r in replies for n in r}) == len(names) else 1)\n"
    )
    hosts = [f"{name}@{socket.gethostname()}" for name in names]
    cs.wait_for(
        lambda: subprocess.run([sys.executable, "-c", code, *hosts], env=env).returncode == 0,
        "celery workers",
        120,
        interval=1.0,
    )


@pytest.mark.parametrize("what", ["worker", "pool process"])
def test_a_step_whose_worker_is_killed_is_retried_on_a_live_worker(cluster, tmp_path, what):
    services, env = cluster
    _wait_for_workers(env, ["worker-1", "worker-2"])
    config = tmp_path / "run.yaml"
    execution = {"liveness_check_seconds": 1.0, "missed_pings_for_lost": 2}
    config.write_text(yaml.safe_dump({"execution": {"config": execution}}))
    log = tmp_path / "run.log"
    command = [str(cs.BIN / "dagster"), "job", "execute", "-m", "tests.pipelines.celery_jobs"]
    command += ["-j", "lost_worker_job", "-c", str(config)]
    with open(log, "wb") as handle:
        run = subprocess.Popen(command, cwd=ROOT, env=env, stdout=handle, stderr=subprocess.STDOUT)
    try:
        first = tmp_path / "attempts" / "attempt-1.json"
        cs.wait_for(first.exists, "the first attempt", 120)
        victim = json.loads(first.read_text())
        if what == "worker":  # the whole worker, as when its machine goes away
            services.kill(victim["worker"])
        else:  # only the process running the step, as the OOM killer would
            os.kill(victim["pid"], signal.SIGKILL)
        assert run.wait(180) == 0, log.read_text()[-4000:]
    finally:
        if run.poll() is None:
            run.kill()
    second = json.loads((tmp_path / "attempts" / "attempt-2.json").read_text())
    output = log.read_text()
    assert "STEP_UP_FOR_RETRY" in output and 'step "long_step" was lost' in output
    assert "RUN_SUCCESS" in output
    if what == "worker":
        assert "stopped answering" in output
        assert second["worker"] != victim["worker"]
    else:
        assert "process died" in output
    assert second["pid"] != victim["pid"]
    assert not (tmp_path / "attempts" / "attempt-3.json").exists()  # retried once, not twice
