"""Jobs, each selecting groups of the language-partitioned assets (a run is one language:
the partition comes from the selected assets)."""

from __future__ import annotations

from dagster import AssetSelection, define_asset_job

from assets.framework.catalog import DATA_GROUP, MODEL_GROUP, MULTI_GROUP, SCOREBOARD_GROUP
from assets.settings.profiles import profile_summary

#: Asset groups in pipeline order; every partitioned asset belongs to exactly one. The
#: unpartitioned scoreboard (group ``scoreboard``) has a job of its own.
DATA_GROUPS = (DATA_GROUP,)
MODEL_GROUPS = (MODEL_GROUP,)

psp_language_job = define_asset_job(
    "psp_language_job",
    selection=AssetSelection.groups(*DATA_GROUPS, *MODEL_GROUPS),
    description="Everything for one language: download, filter, vocabulary, pack, train, "
    "evaluate. Pick the cost with the profile (in the launchpad: the profile resource's "
    "name: smoke, demo or paper); on a CPU "
    f"and the shared data: {profile_summary()} (measured: benchmarks/RESULTS.md#profile-costs).",
)

prepare_data_job = define_asset_job(
    "prepare_data_job",
    selection=AssetSelection.groups(*DATA_GROUPS),
    description="Data preparation only: raw pairs to the packed training HDF5 (the profile "
    "sets the vocabulary: smoke 500, demo 20,000, paper 50,000).",
)

train_evaluate_job = define_asset_job(
    "train_evaluate_job",
    selection=AssetSelection.groups(*MODEL_GROUPS),
    description="Train on the packed data that is already there, then evaluate. The profile "
    "(the profile resource's name in the launchpad) sets the model and the schedule; on a CPU: "
    f"{profile_summary()} (measured: benchmarks/RESULTS.md#profile-costs).",
)

prepare_pairs_job = define_asset_job(
    "prepare_pairs_job",
    selection=AssetSelection.assets("deduplicated_pairs").upstream(),
    description="One language's pairs up to deduplicated_pairs: what the multilingual model "
    "reads (make run PARTITION=multi runs it for each of its languages first).",
)

psp_multi_job = define_asset_job(
    "psp_multi_job",
    selection=AssetSelection.groups(MULTI_GROUP, SCOREBOARD_GROUP),
    description="The multilingual model (not partitioned): the [multi] languages' "
    "deduplicated pairs, temperature-sampled, one vocabulary, training, evaluation on every "
    "set, then the scoreboard. The languages' pairs must be there: make run PARTITION=multi "
    "builds them first.",
)

scoreboard_job = define_asset_job(
    "scoreboard_job",
    selection=AssetSelection.groups(SCOREBOARD_GROUP),
    description="One table of every evaluated language's results (not partitioned).",
)

JOBS = [
    psp_language_job,
    prepare_data_job,
    train_evaluate_job,
    prepare_pairs_job,
    psp_multi_job,
    scoreboard_job,
]
