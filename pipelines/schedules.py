"""Periodic retraining: one run per language, weekly by default.

Every stage skips itself when its inputs and settings are unchanged (see ``assets.framework.stage``), so a
scheduled run is cheap (benchmarks/RESULTS.md#noop-rerun) unless something changed: new inbox
files, a registry edit, or a new release of a corpus configured as ``version = "latest"``.
Scheduled runs use the paper's settings (``PSP_RETRAIN_PROFILE`` picks another profile).
"""

from __future__ import annotations

from dagster import DefaultScheduleStatus, RunRequest, ScheduleEvaluationContext, schedule

from assets.settings.languages import load_registry
from assets.settings.profiles import retrain_profile_words, retrain_run_config
from pipelines.jobs import psp_language_job

RETRAIN_CRON = "0 3 * * 1"  # Mondays 03:00


def _description() -> str:
    """What the UI shows of the schedule: the profile its runs use and that unchanged stages
    are reused."""
    return (
        f"Weekly retraining, Mondays 03:00 UTC: one run per language of the registry, each with "
        f"{retrain_profile_words()}. Unchanged stages are reused."
    )


@schedule(
    job=psp_language_job,
    cron_schedule=RETRAIN_CRON,
    execution_timezone="UTC",
    default_status=DefaultScheduleStatus.STOPPED,
    description=_description(),
)
def weekly_retrain_schedule(context: ScheduleEvaluationContext):
    stamp = context.scheduled_execution_time.strftime("%Y-%m-%dT%H:%M")
    run_config = retrain_run_config()
    profile = run_config["resources"]["profile"]["config"]["name"]
    for lang in load_registry().codes:
        yield RunRequest(
            run_key=f"retrain-{lang}-{stamp}",
            partition_key=lang,
            run_config=run_config,
            # shown in the schedule's preview, one row per request
            tags={"psp/trigger": "schedule", "psp/language": lang, "psp/profile": profile},
        )
