"""Periodic retraining: one run per language, weekly by default.

Every stage skips itself when its inputs and settings are unchanged (see ``assets.stage``), so a
scheduled run is cheap (benchmarks/RESULTS.md#noop-rerun) unless something changed: new inbox
files, a registry edit, or a new release of a corpus configured as ``version = "latest"``.
Scheduled runs use the paper's settings (``PSP_RETRAIN_PROFILE`` picks another profile).
"""

from __future__ import annotations

from dagster import DefaultScheduleStatus, RunRequest, ScheduleEvaluationContext, schedule

from assets.languages import load_registry
from assets.profiles import retrain_run_config
from pipelines.jobs import psp_language_job

RETRAIN_CRON = "0 3 * * 1"  # Mondays 03:00


@schedule(
    job=psp_language_job,
    cron_schedule=RETRAIN_CRON,
    execution_timezone="UTC",
    default_status=DefaultScheduleStatus.STOPPED,
    description="Weekly retraining of every language in the registry (unchanged stages are reused).",
)
def weekly_retrain_schedule(context: ScheduleEvaluationContext):
    stamp = context.scheduled_execution_time.strftime("%Y-%m-%dT%H:%M")
    for lang in load_registry().codes:
        yield RunRequest(
            run_key=f"retrain-{lang}-{stamp}",
            partition_key=lang,
            run_config=retrain_run_config(),
            tags={"psp/trigger": "schedule"},
        )
