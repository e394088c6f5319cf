"""The project's single Dagster ``Definitions``, loaded by ``workspace.yaml``.

Assets (one module per stage in ``assets/``, partitioned by language), the jobs that select
their groups, the weekly retraining schedule, the new-bitext sensor, the dead-run sensor, the
resources, configured from the environment (see :func:`assets.settings.resources.default_resources`),
and the executor every job runs with (Dagster's default, plus failing dead runs:
:mod:`pipelines.executor`).
"""

from __future__ import annotations

from dagster import (
    AssetSelection,
    AutomationConditionSensorDefinition,
    DefaultSensorStatus,
    Definitions,
    load_asset_checks_from_modules,
    load_assets_from_modules,
)

from assets.settings.resources import default_resources
from assets.stages import (
    deduplicated_pairs,
    evaluation_scoreboard,
    langid_filtered_pairs,
    length_filtered_pairs,
    model_evaluation,
    multi,
    psp_model,
    raw_pairs,
    retrain_plan,
    sentencepiece_model,
    training_data,
)
from pipelines.executor import code_location_executor
from pipelines.jobs import JOBS
from pipelines.schedules import weekly_retrain_schedule
from pipelines.sensors import dead_run_sensor, new_bitext_sensor

#: Stage modules in pipeline order.
ASSET_MODULES = [
    raw_pairs,
    langid_filtered_pairs,
    length_filtered_pairs,
    deduplicated_pairs,
    retrain_plan,
    sentencepiece_model,
    training_data,
    psp_model,
    model_evaluation,
    multi,
    evaluation_scoreboard,
]

#: evaluates the scoreboard's automation condition (running from the start: the scoreboard
#: refreshes after each language's evaluation without anyone turning it on)
scoreboard_automation = AutomationConditionSensorDefinition(
    "scoreboard_automation",
    target=AssetSelection.assets("evaluation_scoreboard"),
    description="Refreshes the evaluation scoreboard (every language's scores side by side) "
    "after a language's evaluation is materialized; on from the start, checked every 30 s.",
    default_status=DefaultSensorStatus.RUNNING,
    minimum_interval_seconds=30,
)

defs = Definitions(
    assets=load_assets_from_modules(ASSET_MODULES),
    asset_checks=load_asset_checks_from_modules(ASSET_MODULES),
    jobs=JOBS,
    schedules=[weekly_retrain_schedule],
    sensors=[new_bitext_sensor, dead_run_sensor, scoreboard_automation],
    resources=default_resources(),
    executor=code_location_executor(),
)
