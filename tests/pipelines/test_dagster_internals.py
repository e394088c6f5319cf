"""What ``pipelines.dagster_internals`` takes from Dagster's private modules still behaves as the
Celery executor relies on. A Dagster release that changes one of these fails here, by name; the
Celery tests (a worker killed under a step, its retry) exercise the events end to end."""

from __future__ import annotations

import inspect

from dagster import DagsterEvent, RetryPolicy

from pipelines import dagster_internals
from pipelines.dagster_internals import (
    RetryMode,
    SerializableErrorInfo,
    StepFailureData,
    StepRetryData,
    get_retries_config,
)


def test_the_retries_setting_defaults_to_enabled_and_reads_back_as_a_retry_mode() -> None:
    assert get_retries_config().default_value == {"enabled": {}}
    assert RetryMode.from_config({"enabled": {}}) is RetryMode.ENABLED
    assert not RetryMode.from_config({"enabled": {}}).disabled
    assert RetryMode.from_config({"disabled": {}}).disabled


def test_the_step_events_take_the_arguments_we_pass() -> None:
    retry = inspect.signature(DagsterEvent.step_retry_event).parameters
    failure = inspect.signature(DagsterEvent.step_failure_event).parameters
    assert list(retry)[:2] == ["step_context", "step_retry_data"]
    assert list(failure)[:2] == ["step_context", "step_failure_data"]
    error = SerializableErrorInfo(message="lost", stack=[], cls_name="CeleryWorkerLost")
    assert StepRetryData(error=error, seconds_to_wait=1.5).seconds_to_wait == 1.5
    assert StepFailureData(error=error, user_failure_data=None).error.cls_name == "CeleryWorkerLost"


class _StepContext:
    """The two attributes of a step context that decide between a retry and a failure."""

    def __init__(self, policy: RetryPolicy | None, mode: RetryMode) -> None:
        self.op_retry_policy = policy
        self.retry_mode = mode


def test_a_lost_step_is_retried_while_its_policy_allows_and_fails_after(monkeypatch) -> None:
    made = []
    monkeypatch.setattr(DagsterEvent, "step_retry_event", lambda ctx, data: made.append(data))
    monkeypatch.setattr(DagsterEvent, "step_failure_event", lambda ctx, data: made.append(data))
    policy = RetryPolicy(max_retries=2, delay=3)
    enabled = RetryMode.from_config({"enabled": {}})
    for attempts in (0, 1, 2):
        context = _StepContext(policy, enabled)
        dagster_internals.step_failure_or_retry(context, attempts, "gone", "Lost", None)
    context = _StepContext(None, enabled)
    dagster_internals.step_failure_or_retry(context, 0, "gone", "Lost", policy)  # the fallback
    disabled = RetryMode.from_config({"disabled": {}})
    dagster_internals.step_failure_or_retry(_StepContext(policy, disabled), 0, "gone", "Lost", None)
    kinds = [type(data).__name__ for data in made]
    assert kinds == [
        "StepRetryData",
        "StepRetryData",
        "StepFailureData",
        "StepRetryData",
        "StepFailureData",
    ]
    assert made[0].seconds_to_wait == 3 and made[0].error.message == "gone"
