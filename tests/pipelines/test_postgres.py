"""Dagster on PostgreSQL: a real server started by scripts/postgres.py on 127.0.0.1,
its credentials from the environment, holds the runs and events of a real ``dagster job
execute``; restarted between two runs, the next run works. Skipped, with a message, without
Debian's postgresql package or the ``cluster`` extra (dagster-postgres)."""

from __future__ import annotations

import importlib.util
import secrets
import shutil
import socket
import sys
import tempfile
from pathlib import Path

import pytest

from tests.ops.opus_server import OpusServer, build_moses_zip
from tests.pipelines.corpora import publish_de
from tests.pipelines.dagster_cli import Runs, dagster_env, tail, write_config

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "scripts"))
import postgres  # noqa: E402  (scripts/postgres.py)


def _postgres_installed() -> bool:
    try:
        postgres.bin_dir()
    except postgres.PostgresError:
        return False
    return True


pytestmark = [
    pytest.mark.skipif(
        not _postgres_installed(), reason="PostgreSQL is not installed (apt-get install postgresql)"
    ),
    pytest.mark.skipif(
        importlib.util.find_spec("dagster_postgres") is None,
        reason="dagster-postgres is not installed (pip install -e '.[cluster]')",
    ),
]


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@pytest.mark.slow
def test_runs_are_stored_in_postgres_and_survive_a_server_restart(
    tmp_path, monkeypatch, warm_runs
) -> None:
    port = _free_port()
    credentials = {
        "PSP_PG_USER": "psp",
        "PSP_PG_PASSWORD": secrets.token_urlsafe(16),
        "PSP_PG_DB": "dagster",
        "PSP_PG_HOST": "127.0.0.1",
        "PSP_PG_PORT": str(port),
    }
    for name, value in credentials.items():
        monkeypatch.setenv(name, value)
    # under root the server runs as the postgres user: its folder must be one it can reach
    # (pytest's temporary folders are private to root)
    reachable = Path(tempfile.mkdtemp(prefix="psp-pg-test-"))
    reachable.chmod(0o711)
    data_dir = reachable / "data"
    server = OpusServer().start()
    try:
        postgres.start(data_dir, port)
        publish_de(server, build_moses_zip)
        env = dagster_env(tmp_path, server) | credentials
        postgres.write_instance(Path(env["DAGSTER_HOME"]))
        config = write_config(tmp_path / "smoke.yaml", "smoke.yaml", epochs=1, in_process=True)
        with Runs(warm_runs) as runs:
            first = runs.execute("psp_language_job", config, env, tmp_path / "first.log")
            assert first.wait(300) == 0, tail(tmp_path / "first.log")
            # the server goes down and comes back between two runs
            postgres.stop(data_dir)
            assert not postgres.status(data_dir)
            postgres.start(data_dir, port)
            second = runs.execute("psp_language_job", config, env, tmp_path / "second.log")
            assert second.wait(300) == 0, tail(tmp_path / "second.log")

        monkeypatch.setenv("DAGSTER_HOME", env["DAGSTER_HOME"])
        from dagster import DagsterInstance, DagsterRunStatus

        with DagsterInstance.get() as instance:
            assert type(instance.run_storage).__name__ == "PostgresRunStorage"
            runs_stored = instance.get_runs()
            assert [r.status for r in runs_stored] == [DagsterRunStatus.SUCCESS] * 2
            # the second run reused every stage: the events of both are in the database
            assert len(instance.all_logs(runs_stored[1].run_id)) > 10
        assert not (Path(env["DAGSTER_HOME"]) / "history").exists()  # no SQLite fallback
        # the instance settings name the variables, never the secret
        assert (
            credentials["PSP_PG_PASSWORD"]
            not in (Path(env["DAGSTER_HOME"]) / "dagster.yaml").read_text()
        )
    finally:
        server.stop()
        postgres.stop(data_dir)
    assert not postgres.status(data_dir)
    # nothing left running: no postmaster for this data directory
    assert not (data_dir / "postmaster.pid").exists()
    shutil.rmtree(reachable)
