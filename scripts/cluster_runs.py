"""What the cluster end-to-end (``scripts/cluster_e2e.py``) and its faults
(``scripts/cluster_faults.py``) read back from the Dagster instance: runs, which worker ran each
step and when, retries, training windows; and whether a bundle loads."""

from __future__ import annotations

import time
from pathlib import Path

TRAINING_STEP = "psp_model"
UPSTREAM = ("sentencepiece_model", "training_data")  # the training step's inputs
TERMINAL = {"SUCCESS", "FAILURE", "CANCELED"}


class CheckFailed(RuntimeError):
    pass


def check(condition: bool, message: str) -> None:
    if not condition:
        raise CheckFailed(message)


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
    """(step, worker) for each Celery task of ``run``, in order."""
    return [(step, worker) for step, worker, _ in step_attempts(run)]


def step_attempts(run) -> list[tuple[str, str, float]]:
    """(step, worker, start time) for each Celery task of ``run`` that started, in order
    (dagster-celery's engine event "Executing steps ... in celery worker" carries the worker's
    hostname)."""
    attempts = []
    with instance() as dagster:
        for record in dagster.get_records_for_run(run.run_id).records:
            entry = record.event_log_entry
            event = entry.dagster_event
            if event is None or not event.is_engine_event or event.engine_event_data is None:
                continue
            worker = event.engine_event_data.metadata.get("Celery worker")
            if worker is None:
                continue
            attempts.append((entry.step_key, worker.value, entry.timestamp))
    return attempts


def step_succeeded(run, step: str) -> bool:
    from dagster import DagsterEventType

    with instance() as dagster:
        records = dagster.get_records_for_run(
            run.run_id, of_type=DagsterEventType.STEP_SUCCESS
        ).records
    return any(r.event_log_entry.step_key == step for r in records)


def retried_steps(run) -> list[str]:
    return [step for step, _ in retries(run)]


def retries(run) -> list[tuple[str, str]]:
    """(step, why) for each retry of a step of ``run``, in order."""
    with instance() as dagster:
        records = dagster.get_records_for_run(run.run_id).records
    found = []
    for record in records:
        event = record.event_log_entry.dagster_event
        if event is not None and event.is_step_up_for_retry:
            error = getattr(event.event_specific_data, "error", None)
            found.append((record.event_log_entry.step_key, error.message if error else ""))
    return found


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


def training_windows(runs, by_run: bool = False) -> dict[str, list[float]]:
    """[start, end] of each run's training (its materialization's metadata), by partition or
    (``by_run``) by run id."""
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
                    key = run.run_id if by_run else run.tags["dagster/partition"]
                    windows[key] = [start, end]
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
