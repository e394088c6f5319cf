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
6. stops everything it started, by process group (also on failure and on Ctrl-C), and checks no
   process of theirs is left.

The last line printed is a JSON summary: ``storage``, ``executor``, ``runs`` (``partition``,
``status``), ``step_workers`` (``partition/step`` -> the workers that ran it, in order),
``training_overlap_ok`` (with ``training_windows`` and ``training_pool_wait_s``: how long each
training step waited for the pool's slot), ``bundles_loaded``, ``worker_kill``, ``postgres_restart_run``,
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

from tests.ops.opus_server import OpusServer, build_moses_zip  # noqa: E402
from tests.pipelines.corpora import paranmt_zip, publish_de, write_eval_dir  # noqa: E402

JOB = "psp_language_job"
TRAINING_STEP = "psp_model"
UPSTREAM = ("sentencepiece_model", "training_data")  # the training step's inputs
TERMINAL = {"SUCCESS", "FAILURE", "CANCELED"}


class CheckFailed(RuntimeError):
    pass


def check(condition: bool, message: str) -> None:
    if not condition:
        raise CheckFailed(message)


def _interrupt(signum, _frame) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


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
                "PYTHONPATH": str(ROOT),
                "NO_PROXY": "127.0.0.1,localhost",
                "no_proxy": "127.0.0.1,localhost",
            }
        )
        os.environ.update({k: self.env[k] for k in ("DAGSTER_HOME", "PSP_CELERY_BROKER")})
        cs.start_redis(self.services, self.work / "redis", self.redis_port)
        cs.start_code_server(self.services, self.env, ROOT, self.grpc_port)
        for _ in range(self.worker_count):
            self.add_worker()
        cs.start_daemon(self.services, self.env, self.work, self.workspace)

    def add_worker(self) -> str:
        name = f"worker-{self.next_worker}"
        self.next_worker += 1
        cs.start_worker(self.services, name, self.env, self.work)
        hostname = f"{name}@{socket.gethostname()}"
        cs.wait_for(lambda: bool(celery_app().control.ping([hostname], timeout=1.0)), name, 120)
        return name

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


def celery_app():
    from pipelines.celery_worker import app

    return app


def instance():
    from dagster import DagsterInstance

    return DagsterInstance.get()


def runs_of(tags: dict) -> list:
    from dagster import RunsFilter

    with instance() as dagster:
        return list(dagster.get_runs(RunsFilter(tags=tags)))


def wait_for_runs(tags: dict, count: int, timeout: float, on_tick=None) -> list:
    deadline = time.monotonic() + timeout
    while True:
        runs = runs_of(tags)
        if len(runs) >= count and all(run.status.value in TERMINAL for run in runs):
            return runs
        check(time.monotonic() < deadline, f"runs {tags} not done after {timeout:.0f} s")
        if on_tick is not None:
            on_tick(runs)
        time.sleep(0.5)


def step_workers(run) -> list[tuple[str, str]]:
    """(step, worker) for each Celery task of ``run``, in order (dagster-celery's engine event
    "Executing steps ... in celery worker" carries the worker's hostname)."""
    pairs = []
    with instance() as dagster:
        for record in dagster.get_records_for_run(run.run_id).records:
            entry = record.event_log_entry
            event = entry.dagster_event
            if event is None or not event.is_engine_event or event.engine_event_data is None:
                continue
            worker = event.engine_event_data.metadata.get("Celery worker")
            if worker is None:
                continue
            pairs.append((entry.step_key, worker.value))
    return pairs


def step_succeeded(run, step: str) -> bool:
    from dagster import DagsterEventType

    with instance() as dagster:
        records = dagster.get_records_for_run(
            run.run_id, of_type=DagsterEventType.STEP_SUCCESS
        ).records
    return any(r.event_log_entry.step_key == step for r in records)


def retried_steps(run) -> list[str]:
    with instance() as dagster:
        records = dagster.get_records_for_run(run.run_id).records
    return [
        r.event_log_entry.step_key
        for r in records
        if r.event_log_entry.dagster_event and r.event_log_entry.dagster_event.is_step_up_for_retry
    ]


def training_pool_wait(run) -> float | None:
    """Seconds from the training step's inputs being ready (the last upstream step's success) to
    the executor sending it to a worker: the time it waited for a ``psp_training`` pool slot."""
    from dagster import DagsterEventType

    ready, submitted = [], None
    with instance() as dagster:
        for record in dagster.get_records_for_run(run.run_id).records:
            entry = record.event_log_entry
            event = entry.dagster_event
            if event is None:
                continue
            if event.event_type == DagsterEventType.STEP_SUCCESS and entry.step_key in UPSTREAM:
                ready.append(entry.timestamp)
            elif (
                submitted is None
                and entry.step_key == TRAINING_STEP
                and event.is_engine_event
                and "Submitting celery task" in (event.message or "")
            ):
                submitted = entry.timestamp
    if submitted is None or len(ready) < len(UPSTREAM):
        return None
    return round(submitted - max(ready), 1)


def training_windows(runs) -> dict[str, list[float]]:
    from dagster import AssetKey

    windows = {}
    with instance() as dagster:
        for run in runs:
            for record in dagster.get_records_for_run(run.run_id).records:
                materialization = record.event_log_entry.asset_materialization
                if materialization and materialization.asset_key == AssetKey(TRAINING_STEP):
                    metadata = materialization.metadata
                    start, end = (
                        metadata["training_started"].value,
                        metadata["training_ended"].value,
                    )
                    windows[run.tags["dagster/partition"]] = [start, end]
    return windows


def overlap_ok(windows: dict[str, list[float]], limit: int = 1) -> bool:
    """No instant covered by more than ``limit`` training windows."""
    edges = sorted([(s, 1) for s, _ in windows.values()] + [(e, -1) for _, e in windows.values()])
    depth = 0
    for _, change in edges:  # ends sort before starts at the same instant
        depth += change
        if depth > limit:
            return False
    return True


def bundle_loads(storage: Path, lang: str) -> bool:
    import numpy as np

    from psp_core import load_model

    model = load_model(storage / lang / "psp_model" / "model", device="cpu")
    vectors = model.embed(["The old man reads a long letter.", ""], show_progress_bar=False)
    return bool(vectors.shape[0] == 2 and np.isfinite(vectors).all() and not vectors[1].any())


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
    runs = wait_for_runs(
        {"dagster/backfill": backfill_id}, len(args.languages), args.timeout, on_tick=killer
    )
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


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--languages", nargs="+", default=["de", "en"])
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--timeout", type=float, default=900, help="seconds per wait for runs")
    parser.add_argument("--no-faults", dest="faults", action="store_false")
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
