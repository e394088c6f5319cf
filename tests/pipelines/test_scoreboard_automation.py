"""The scoreboard refreshes by itself: a language's new evaluation makes the automation request
it (once), with the automation sensor running from the start."""

from __future__ import annotations

from dagster import (
    AssetKey,
    AssetMaterialization,
    DagsterInstance,
    evaluate_automation_conditions,
)

from pipelines.definitions import defs

SCOREBOARD = AssetKey("evaluation_scoreboard")


def test_a_new_evaluation_requests_the_scoreboard_once() -> None:
    instance = DagsterInstance.ephemeral()
    result = evaluate_automation_conditions(defs=defs, instance=instance)
    assert result.get_num_requested(SCOREBOARD) == 0  # nothing evaluated: nothing to show

    instance.report_runless_asset_event(AssetMaterialization("model_evaluation", partition="de"))
    result = evaluate_automation_conditions(defs=defs, instance=instance, cursor=result.cursor)
    assert result.get_num_requested(SCOREBOARD) == 1
    # only evaluations drive it: no other asset is requested
    assert result.total_requested == 1

    result = evaluate_automation_conditions(defs=defs, instance=instance, cursor=result.cursor)
    assert result.get_num_requested(SCOREBOARD) == 0  # not again without a newer evaluation


def test_evaluations_made_before_the_first_tick_request_the_scoreboard_once() -> None:
    # the daemon (and so the automation sensor) started after languages were evaluated
    instance = DagsterInstance.ephemeral()
    for lang in ("de", "fr"):
        event = AssetMaterialization("model_evaluation", partition=lang)
        instance.report_runless_asset_event(event)
    result = evaluate_automation_conditions(defs=defs, instance=instance)
    assert result.get_num_requested(SCOREBOARD) == 1 and result.total_requested == 1
    result = evaluate_automation_conditions(defs=defs, instance=instance, cursor=result.cursor)
    assert result.get_num_requested(SCOREBOARD) == 0  # once, not on every tick


def test_the_automation_sensor_runs_by_default() -> None:
    sensor = defs.get_repository_def().get_sensor_def("scoreboard_automation")
    assert sensor.default_status.value == "RUNNING"
