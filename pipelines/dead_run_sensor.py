"""dead_run_sensor: the daemon's sweep for runs whose worker died (``pipelines.dead_runs``).

Runs fail their dead predecessors when they start and while they execute
(``pipelines.executor``); under ``dagster dev`` or ``dagster-daemon`` this sensor also does it
every 30 seconds when no run is executing, so a killed run shows as failed in the UI, stops
counting against ``max_concurrent_runs`` and gives back its pool slots without waiting for the
next run. It never requests runs; it is on by default.
"""

from __future__ import annotations

from dagster import DefaultSensorStatus, SensorEvaluationContext, SkipReason, sensor

from pipelines.dead_runs import fail_dead_runs

INTERVAL_SECONDS = 30


@sensor(
    name="dead_run_sensor",
    minimum_interval_seconds=INTERVAL_SECONDS,
    default_status=DefaultSensorStatus.RUNNING,
    description=(
        "Marks failed the runs whose worker process on this host is gone (kill -9, OOM) and "
        "frees their concurrency slots (the psp_training pool). Never starts a run."
    ),
)
def dead_run_sensor(context: SensorEvaluationContext) -> SkipReason:
    failed = fail_dead_runs(context.instance, context.log.warning)
    if failed:
        return SkipReason(f"marked {len(failed)} dead run(s) failed: {', '.join(failed)}")
    return SkipReason("no dead runs")
