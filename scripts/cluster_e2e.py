"""The documented cluster path, run for real on one machine: PostgreSQL storage, a Redis broker,
Celery workers, the queued run coordinator with the daemon, and a gRPC code server; a backfill of
two languages with the smoke profile against a loopback OPUS server; faults on the way.

    python scripts/cluster_e2e.py [--languages de en] [--workers 2] [--keep DIR] [--no-faults]

(``make cluster-e2e`` installs what is missing first.) In order:

1. starts PostgreSQL (``scripts/postgres.py``, credentials generated into the environment), Redis,
   the code server (``PSP_EXECUTOR=celery``: every step is a Celery task), ``--workers`` Celery
   workers each in a working directory of its own, and ``dagster-daemon`` (the run queue);
2. submits a backfill of ``--languages`` (``dagster job backfill``): its runs are queued, the
   daemon launches them side by side, and their steps go to whichever worker is free;
3. fault: once a ``psp_model`` (training) step runs on a worker, ``kill -9`` that worker's whole
   process group, and start a new worker in its place. The executor must notice the lost worker
   and retry the step (Dagster's retry machinery) on another worker, and the run must succeed;
4. checks each run succeeded, each bundle loads and embeds (``psp_core.load_model``), and the
   trainings never overlapped beyond the ``psp_training`` pool's limit (1), across workers;
5. fault: restarts PostgreSQL, then runs one more language run through the same daemon, code
   server and workers (every stage reused), which must succeed;
6. partial failures (``scripts/cluster_faults.py``), each on a run of its own whose training
   runs again: a worker restarted under the same name, a run stopped while its worker is dead,
   a worker paused (its main process, then its whole process group), its pool process killed,
   a worker killed between accepting a step and starting it, Redis restarted, the storage's disk
   filled (``--fault NAME`` runs only some);
7. stops everything it started, by process group (also on failure and on Ctrl-C), and checks no
   process of theirs is left.

The last line printed is a JSON summary: ``storage``, ``executor``, ``runs`` (``partition``,
``status``), ``step_workers`` (``partition/step`` -> the workers that ran it, in order),
``training_overlap_ok`` (with ``training_windows`` and ``training_pool_wait_s``: how long each
training step waited for the pool's slot), ``bundles_loaded``, ``worker_kill``, ``postgres_restart_run``,
``faults`` (each fault's ``ok`` and what was seen, and ``training_overlap_ok`` over their runs),
``left_running``, ``elapsed_s`` and ``ok``. Exit status 0 when every check passed.
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))

import cluster_services as cs  # noqa: E402
import postgres  # noqa: E402
from cluster_faults import FAULTS, run_faults  # noqa: E402
from cluster_runs import (  # noqa: E402
    TERMINAL,
    TRAINING_STEP,
    CheckFailed,
    bundle_loads,
    celery_app,
    check,
    overlap_ok,
    retried_steps,
    step_succeeded,
    step_workers,
    training_pool_wait,
    training_windows,
    wait_for_runs,
)

from pipelines import celery_step_heartbeat  # noqa: E402
from tests.ops.opus_server import OpusServer, build_moses_zip  # noqa: E402
from tests.pipelines.corpora import paranmt_zip, publish_de, write_eval_dir  # noqa: E402

JOB = "psp_language_job"


#: the stop signals received: kept as well as raised, since a library on the way (a database
#: driver, a pool's clean-up) may catch the KeyboardInterrupt and go on
STOP_SIGNALS: list[int] = []


def _interrupt(signum, _frame) -> None:
    STOP_SIGNALS.append(signum)
    raise KeyboardInterrupt(f"signal {signum}")


def _stop_if_interrupted() -> None:
    """Raise the interrupt again if one was received and lost on the way."""
    if STOP_SIGNALS:
        raise KeyboardInterrupt(f"signal {STOP_SIGNALS[0]}")


class Cluster:
    """The services of one end-to-end run and the environment they share."""

    def __init__(self, work: Path, workers: int) -> None:
        self.work = work
        self.logs = work / "logs"
        self.logs.mkdir(parents=True, exist_ok=True)
        self.services = cs.Services(self.logs)
        self.worker_count = workers
        self.next_worker = 1
        self.pg_data = work / "pgdata"
        self.pg_port = cs.free_port()
        self.redis_port = cs.free_port()
        self.grpc_port = cs.free_port()
        self.dagster_home = work / "dagster_home"
        self.workspace = work / "workspace.yaml"
        self.env: dict[str, str] = {}
        self.postgres_started = False

    def start(self, opus: OpusServer, paranmt_url: str) -> None:
        credentials = {
            "PSP_PG_USER": "psp",
            "PSP_PG_PASSWORD": secrets.token_urlsafe(16),
            "PSP_PG_DB": "dagster",
            "PSP_PG_HOST": "127.0.0.1",
            "PSP_PG_PORT": str(self.pg_port),
        }
        os.environ.update(credentials)  # scripts/postgres.py reads them from the environment
        postgres.start(self.pg_data, self.pg_port)
        self.postgres_started = True
        postgres.write_instance(self.dagster_home)
        self.workspace.write_text(
            "load_from:\n  - grpc_server:\n      host: 127.0.0.1\n"
            f"      port: {self.grpc_port}\n      location_name: pipelines\n"
        )
        eval_dir = self.work / "eval"
        write_eval_dir(eval_dir)
        self.env = (
            os.environ
            | credentials
            | {
                "DAGSTER_HOME": str(self.dagster_home),
                "PSP_STORAGE_ROOT": str(self.work / "storage"),  # shared by every worker
                "PSP_OPUS_API": opus.api_url,
                "PSP_PARANMT_URL": paranmt_url,
                "PSP_EVAL_DIR": str(eval_dir),
                "PSP_DEVICE": "cpu",
                "PSP_PROFILE": "smoke",
                "PSP_EXECUTOR": "celery",
                "PSP_CELERY_BROKER": f"redis://127.0.0.1:{self.redis_port}/0",
                # the step lease, shorter than its defaults: a lost step noticed after 8 s
                "PSP_STEP_HEARTBEAT_SECONDS": "1",
                "PSP_STEP_LEASE_SECONDS": "5",
                "PYTHONPATH": str(ROOT),
                "NO_PROXY": "127.0.0.1,localhost",
                "no_proxy": "127.0.0.1,localhost",
            }
        )
        os.environ.update({k: self.env[k] for k in ("DAGSTER_HOME", "PSP_CELERY_BROKER")})
        cs.start_redis(self.services, self.work / "redis", self.redis_port, durable=True)
        cs.start_code_server(self.services, self.env, ROOT, self.grpc_port)
        for _ in range(self.worker_count):
            self.add_worker()
        cs.start_daemon(self.services, self.env, self.work, self.workspace)

    def add_worker(self) -> str:
        name = f"worker-{self.next_worker}"
        self.next_worker += 1
        return self.start_worker(name)

    def start_worker(self, name: str, app: str = "pipelines.celery_worker", **env: str) -> str:
        """Start worker ``name`` (again, after a kill: the same name) and wait for its answer."""
        cs.start_worker(self.services, name, self.env | env, self.work, app=app)
        hostname = f"{name}@{socket.gethostname()}"
        cs.wait_for(lambda: bool(celery_app().control.ping([hostname], timeout=1.0)), name, 120)
        return name

    def workers(self) -> list[str]:
        return [name for name in self.services.started if name.startswith("worker-")]

    def restart_redis(self) -> float:
        """Stop the broker (it writes its append-only file) and start it again: seconds away."""
        started = time.monotonic()
        self.services.stop("redis")
        cs.start_redis(self.services, self.work / "redis", self.redis_port, durable=True)
        return time.monotonic() - started

    def restart_postgres(self) -> None:
        postgres.stop(self.pg_data)
        check(not postgres.status(self.pg_data), "PostgreSQL did not stop")
        postgres.start(self.pg_data, self.pg_port)

    def stop(self) -> None:
        self.services.stop_all()
        if self.postgres_started:
            postgres.stop(self.pg_data)

    def dagster(self, *arguments: str) -> str:
        command = [str(cs.BIN / "dagster"), *arguments]
        done = subprocess.run(command, env=self.env, cwd=self.work, capture_output=True, text=True)
        check(done.returncode == 0, f"{' '.join(command)} failed:\n{done.stdout}{done.stderr}")
        return done.stdout


class WorkerKiller:
    """Kills the worker on which the first training step starts (once), then starts a new one."""

    def __init__(self, cluster: Cluster) -> None:
        self.cluster = cluster
        self.done: dict | None = None

    def __call__(self, runs) -> None:
        if self.done is not None:
            return
        for run in runs:
            for step, worker in step_workers(run):
                if step != TRAINING_STEP or run.status.value in TERMINAL:
                    continue
                name = worker.split("@")[0]
                if name not in self.cluster.services.started or step_succeeded(run, step):
                    continue  # a worker gone already, or a step already done: not "while it ran"
                self.cluster.services.kill(name)
                print(f"killed {name} (kill -9, its process group) while it ran {step}", flush=True)
                replacement = self.cluster.add_worker()
                self.done = {
                    "killed": worker,
                    "partition": run.tags["dagster/partition"],
                    "step": step,
                    "killed_at": time.time(),
                    "replacement": replacement,
                }
                return


def scenario(cluster: Cluster, args, summary: dict) -> None:
    storage = cluster.work / "storage"
    started = time.monotonic()
    out = cluster.dagster(
        "job", "backfill", "-w", str(cluster.workspace), "-j", JOB,
        "--partitions", ",".join(args.languages), "--noprompt",
    )  # fmt: skip
    backfill_id = out.strip().split("`")[-2] if "`" in out else None
    check(backfill_id is not None, f"no backfill id in: {out}")
    print(f"backfill {backfill_id}: {args.languages}", flush=True)
    killer = WorkerKiller(cluster) if args.faults else None

    def on_tick(runs) -> None:
        _stop_if_interrupted()
        if killer is not None:
            killer(runs)

    runs = wait_for_runs(
        {"dagster/backfill": backfill_id}, len(args.languages), args.timeout, on_tick=on_tick
    )
    _stop_if_interrupted()
    summary["backfill_s"] = round(time.monotonic() - started, 1)
    summary["runs"] = [
        {"partition": r.tags["dagster/partition"], "status": r.status.value, "run_id": r.run_id}
        for r in runs
    ]
    summary["step_workers"] = {}
    for run in runs:
        for step, worker in step_workers(run):
            key = f"{run.tags['dagster/partition']}/{step}"
            summary["step_workers"].setdefault(key, []).append(worker)
    check(all(r.status.value == "SUCCESS" for r in runs), f"runs: {summary['runs']}")
    workers_used = {w for ws in summary["step_workers"].values() for w in ws}
    summary["workers_used"] = sorted(workers_used)
    check(len(workers_used) >= 2, f"every step ran on one worker: {workers_used}")

    if killer is not None:
        check(killer.done is not None, "no training step was seen running: nothing was killed")
        victim = killer.done
        run = next(r for r in runs if r.tags["dagster/partition"] == victim["partition"])
        retried = retried_steps(run)
        attempts = summary["step_workers"][f"{victim['partition']}/{TRAINING_STEP}"]
        victim["retried"] = TRAINING_STEP in retried
        victim["attempts_on"] = attempts
        victim["run_status"] = run.status.value
        summary["worker_kill"] = victim
        check(victim["retried"], f"the killed step was not retried: {retried}")
        check(attempts[-1] != victim["killed"], f"the retry ran on the dead worker: {attempts}")

    windows = training_windows(runs)
    summary["training_windows"] = windows
    summary["training_overlap_ok"] = overlap_ok(windows)
    summary["training_pool_wait_s"] = {
        r.tags["dagster/partition"]: training_pool_wait(r) for r in runs
    }
    check(len(windows) == len(runs), f"trainings found: {sorted(windows)}")
    check(summary["training_overlap_ok"], f"trainings overlapped: {windows}")
    summary["bundles_loaded"] = {lang: bundle_loads(storage, lang) for lang in args.languages}
    check(all(summary["bundles_loaded"].values()), f"bundles: {summary['bundles_loaded']}")

    # the storage server goes down and comes back; the cluster's next run must work
    cluster.restart_postgres()
    lang = args.languages[0]
    tag = {"psp/e2e": f"after-postgres-restart-{secrets.token_hex(4)}"}
    cluster.dagster(
        "job", "launch", "-w", str(cluster.workspace), "-j", JOB,
        "--tags", json.dumps({"dagster/partition": lang, **tag}),
    )  # fmt: skip
    (after,) = wait_for_runs(tag, 1, args.timeout)
    summary["postgres_restart_run"] = {"partition": lang, "status": after.status.value}
    check(after.status.value == "SUCCESS", f"the run after the restart: {after.status.value}")

    if args.faults:  # partial failures, each on a run of its own (scripts/cluster_faults.py)
        lost_after = celery_step_heartbeat.lost_after(
            {
                "beat_s": cluster.env["PSP_STEP_HEARTBEAT_SECONDS"],
                "lease_s": cluster.env["PSP_STEP_LEASE_SECONDS"],
            }
        )
        faults = run_faults(cluster, JOB, args.timeout, lost_after, args.fault or None)
        summary["faults"] = faults
        failed = [
            name for name, seen in faults.items() if isinstance(seen, dict) and not seen["ok"]
        ]
        check(not failed and faults["training_overlap_ok"], f"faults not ok: {failed}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--languages", nargs="+", default=["de", "en"])
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--timeout", type=float, default=900, help="seconds per wait for runs")
    parser.add_argument("--no-faults", dest="faults", action="store_false")
    parser.add_argument(
        "--fault", action="append", choices=sorted(FAULTS), help="run only these faults"
    )
    parser.add_argument("--keep", type=Path, help="work in DIR and keep it (default: temporary)")
    args = parser.parse_args()

    if args.keep:
        shutil.rmtree(args.keep, ignore_errors=True)
        args.keep.mkdir(parents=True)
    # under root the PostgreSQL server runs as the postgres user: it must reach the folder
    work = args.keep or Path(tempfile.mkdtemp(prefix="psp-cluster-e2e-"))
    work.chmod(0o711)
    # Ctrl-C and SIGTERM stop the cluster (also when started with SIGINT ignored, as background
    # jobs of a shell are)
    signal.signal(signal.SIGINT, _interrupt)
    signal.signal(signal.SIGTERM, _interrupt)
    summary: dict = {
        "storage": "postgres",
        "executor": "psp_celery_executor (dagster-celery 0.29.27, Redis broker)",
        "runs": [],
        "step_workers": {},
        "training_overlap_ok": None,
        "bundles_loaded": {},
    }
    started = time.monotonic()
    ok = False
    cluster = Cluster(work, args.workers)
    os.environ["NO_PROXY"] = os.environ["no_proxy"] = "127.0.0.1,localhost"
    opus = OpusServer().start()
    try:
        publish_de(opus, build_moses_zip)
        paranmt_url = opus.add_file("/para-nmt-50m.zip", paranmt_zip(700))
        cluster.start(opus, paranmt_url)
        scenario(cluster, args, summary)
        _stop_if_interrupted()
        ok = True
    except CheckFailed as error:
        summary["error"] = str(error)
    except KeyboardInterrupt as error:
        summary["error"] = f"interrupted ({error or 'Ctrl-C'})"
    except Exception as error:  # a service that did not start, a command that failed
        summary["error"] = f"{type(error).__name__}: {error}"
    finally:
        try:
            cluster.stop()
        finally:
            opus.stop()
        summary["left_running"] = cluster.services.left_running()
        summary["elapsed_s"] = round(time.monotonic() - started, 1)
    ok = ok and not summary["left_running"]
    summary["ok"] = ok
    summary["logs"] = str(cluster.logs) if (args.keep or not ok) else None
    if not args.keep and ok:
        shutil.rmtree(work, ignore_errors=True)
    print(json.dumps(summary))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
