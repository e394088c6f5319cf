"""The Dagster internals this code location relies on, in one place.

Dagster's public API has no way for an executor to report a step whose worker vanished, nor to
read an executor's ``retries`` setting; the Celery executor needs both. Everything it takes from
Dagster's private modules is imported here and nowhere else, and
``tests/pipelines/test_dagster_internals.py`` pins the behaviour used, so that a Dagster release
that changes it fails that test by name instead of a step at run time. The install accepts any
patch release of the Dagster minor series the project is tested on.
"""

from __future__ import annotations

from dagster import DagsterEvent, RetryPolicy
from dagster._core.execution.plan.objects import StepFailureData, StepRetryData
from dagster._core.execution.retries import RetryMode, get_retries_config
from dagster._utils.error import SerializableErrorInfo

__all__ = ["RetryMode", "get_retries_config", "step_failure_or_retry"]


def step_failure_or_retry(
    step_context, attempts: int, message: str, error_class: str, fallback: RetryPolicy | None
) -> DagsterEvent:
    """The event Dagster emits for a step that raised: a retry under the step's RetryPolicy
    (else ``fallback``) while attempts remain and the run's retry mode allows, else a failure.
    ``message`` and ``error_class`` describe the error shown in the run's log."""
    error = SerializableErrorInfo(message=message, stack=[], cls_name=error_class)
    policy = step_context.op_retry_policy or fallback
    if policy and not step_context.retry_mode.disabled and attempts < policy.max_retries:
        return DagsterEvent.step_retry_event(
            step_context,
            StepRetryData(error=error, seconds_to_wait=policy.calculate_delay(attempts + 1)),
        )
    return DagsterEvent.step_failure_event(
        step_context, StepFailureData(error=error, user_failure_data=None)
    )
