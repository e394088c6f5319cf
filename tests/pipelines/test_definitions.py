"""The shape of the pipeline: asset keys, dependencies, groups, partitions, checks, jobs,
schedules, sensors, resources, and the instance settings in dagster.yaml."""

from __future__ import annotations

import logging
import os
import shutil
from pathlib import Path

import pytest
from dagster import AssetKey, DagsterInstance, EnvVar

from assets.settings.languages import load_registry
from assets.settings.resources import (
    DEFAULT_MAX_WORKERS,
    ComputeResource,
    ParaNmtResource,
    default_resources,
)
from ops.sources import paranmt
from ops.sources.opus import OPUS_API
from pipelines.definitions import defs

ROOT = Path(__file__).resolve().parents[2]

EXPECTED_ASSETS = {
    # asset: (group, upstream assets)
    "raw_pairs": ("data", set()),
    "langid_filtered_pairs": ("data", {"raw_pairs"}),
    "length_filtered_pairs": ("data", {"langid_filtered_pairs"}),
    "deduplicated_pairs": ("data", {"length_filtered_pairs"}),
    "retrain_plan": ("data", {"deduplicated_pairs"}),
    "sentencepiece_model": ("data", {"deduplicated_pairs", "retrain_plan"}),
    "training_data": ("data", {"deduplicated_pairs", "retrain_plan", "sentencepiece_model"}),
    "psp_model": ("model", {"retrain_plan", "sentencepiece_model", "training_data"}),
    "model_evaluation": ("model", {"psp_model"}),
}
UNPARTITIONED_ASSETS = {
    "evaluation_scoreboard": ("scoreboard", {"model_evaluation", "multi_evaluation"}),
    # the multilingual model: every language's deduplicated pairs, then the shared stages
    "multi_pairs": ("multi", {"deduplicated_pairs"}),
    "multi_retrain_plan": ("multi", {"multi_pairs"}),
    "multi_sentencepiece_model": ("multi", {"multi_pairs", "multi_retrain_plan"}),
    "multi_training_data": (
        "multi",
        {"multi_pairs", "multi_retrain_plan", "multi_sentencepiece_model"},
    ),
    "multi_psp_model": (
        "multi",
        {"multi_retrain_plan", "multi_sentencepiece_model", "multi_training_data"},
    ),
    "multi_evaluation": ("multi", {"multi_psp_model"}),
}
EXPECTED_CHECKS = {
    ("raw_pairs", "raw_pairs_not_empty"),
    ("langid_filtered_pairs", "langid_pass_rate_in_range"),
    ("length_filtered_pairs", "length_filtered_pairs_not_empty"),
    ("deduplicated_pairs", "deduplicated_pairs_not_empty"),
    ("training_data", "training_data_has_no_empty_sentences"),
    ("psp_model", "model_vocab_matches_sentencepiece"),
    ("psp_model", "model_weights_finite"),
    ("multi_pairs", "deduplicated_pairs_not_empty"),
    ("multi_training_data", "training_data_has_no_empty_sentences"),
    ("multi_psp_model", "model_vocab_matches_sentencepiece"),
    ("multi_psp_model", "model_weights_finite"),
}
#: checks that warn and never block: the promotion gate kept the earlier model
WARNING_CHECKS = {("psp_model", "model_promoted"), ("multi_psp_model", "model_promoted")}
EXPECTED_JOBS = {
    "psp_language_job": set(EXPECTED_ASSETS),
    "prepare_data_job": {
        "raw_pairs",
        "langid_filtered_pairs",
        "length_filtered_pairs",
        "deduplicated_pairs",
        "retrain_plan",
        "sentencepiece_model",
        "training_data",
    },
    "train_evaluate_job": {"psp_model", "model_evaluation"},
    "prepare_pairs_job": {
        "raw_pairs",
        "langid_filtered_pairs",
        "length_filtered_pairs",
        "deduplicated_pairs",
    },
}
UNPARTITIONED_JOBS = {
    "scoreboard_job": {"evaluation_scoreboard"},
    "psp_multi_job": {name for name in UNPARTITIONED_ASSETS},
}


def test_assets_dependencies_groups_and_partitions() -> None:
    graph = defs.get_repository_def().asset_graph
    assert {key.to_user_string() for key in graph.get_all_asset_keys()} == set(
        EXPECTED_ASSETS
    ) | set(UNPARTITIONED_ASSETS)
    for name, (group, parents) in EXPECTED_ASSETS.items():
        node = graph.get(AssetKey(name))
        assert node.group_name == group, name
        assert {key.to_user_string() for key in node.parent_keys} == parents, name
        assert node.partitions_def.get_partition_keys() == load_registry().codes, name
        assert node.code_version, name
    for name, (group, parents) in UNPARTITIONED_ASSETS.items():
        node = graph.get(AssetKey(name))
        assert node.group_name == group and node.partitions_def is None, name
        assert {key.to_user_string() for key in node.parent_keys} == parents, name


def test_blocking_asset_checks() -> None:
    graph = defs.get_repository_def().asset_graph
    checks = {(k.asset_key.to_user_string(), k.name) for k in graph.asset_check_keys}
    assert checks == EXPECTED_CHECKS | WARNING_CHECKS
    for key in graph.asset_check_keys:
        spec = graph.get_check_spec(key)
        if (key.asset_key.to_user_string(), key.name) in WARNING_CHECKS:
            assert not spec.blocking and "promoted" in spec.description, key
            continue
        assert spec.blocking, key
        # the UI shows it beside the check: what is checked and why it blocks
        assert spec.description and "Blocking" in spec.description, key


def test_every_asset_has_an_owner_and_one_of_four_groups() -> None:
    graph = defs.get_repository_def().asset_graph
    groups = set()
    for key in graph.get_all_asset_keys():
        node = graph.get(key)
        assert node.owners == ["team:psp"], key
        groups.add(node.group_name)
    assert groups == {"data", "model", "multi", "scoreboard"}


#: what a description in the UI must not show: the code behind it rather than the user's words
CODE_WORDS = ("psp_core.", "FilterSettings", "(resources:", "config: name", "_for_language(")


def test_every_description_in_the_ui_is_in_a_users_words() -> None:
    repository = defs.get_repository_def()
    graph = repository.asset_graph
    described = {
        key.to_user_string(): graph.get(key).description for key in graph.get_all_asset_keys()
    }
    described |= {job.name: job.description for job in repository.get_all_jobs()}
    described |= {sensor.name: sensor.description for sensor in repository.sensor_defs}
    described |= {schedule.name: schedule.description for schedule in repository.schedule_defs}
    for name, text in described.items():
        if name.startswith("__"):  # (Dagster's own implicit job)
            continue
        assert text, f"{name}: no description"
        assert not [w for w in CODE_WORDS if w in text], f"{name}: {text}"


def test_download_retry_policy_and_training_pool() -> None:
    raw = defs.get_assets_def("raw_pairs")
    assert raw.op.retry_policy is not None and raw.op.retry_policy.max_retries >= 2
    assert defs.get_assets_def("psp_model").op.pool == "psp_training"


def test_jobs_select_their_groups() -> None:
    for name, expected in EXPECTED_JOBS.items():
        job = defs.resolve_job_def(name)
        assert job.partitions_def is not None
        assert job.partitions_def.get_partition_keys() == load_registry().codes
        selected = {key.to_user_string() for key in job.asset_layer.executable_asset_keys}
        assert selected == expected, name
    for name, expected in UNPARTITIONED_JOBS.items():
        job = defs.resolve_job_def(name)
        assert job.partitions_def is None
        assert {key.to_user_string() for key in job.asset_layer.executable_asset_keys} == expected


def test_schedule_sensor_and_resources() -> None:
    repository = defs.get_repository_def()
    assert repository.get_schedule_def("weekly_retrain_schedule").job_name == "psp_language_job"
    sensor = repository.get_sensor_def("new_bitext_sensor")
    assert sensor.job_name == "psp_language_job"
    assert sensor.minimum_interval_seconds >= 60
    assert repository.get_sensor_def("dead_run_sensor").default_status.value == "RUNNING"
    assert repository.get_job("psp_language_job").executor_def.name == "psp_executor"
    resources = set(repository.get_top_level_resources())
    assert resources == {"storage", "opus", "paranmt", "langid", "compute", "eval_data", "profile"}


def test_internet_urls_are_shown_only_where_the_registry_downloads(
    monkeypatch, caplog: pytest.LogCaptureFixture
) -> None:
    """Under the offline registry (every language local but en, whose ParaNMT make run points
    at a local file through PSP_PARANMT_URL) the launchpad shows no internet URL; under the
    shipped one it shows OPUS's API. ParaNMT has no default URL (its old one is dead): unset,
    loading warns in one line, and the en partition stops at once saying what to do."""
    for variable in ("PSP_OPUS_API", "PSP_PARANMT_URL"):
        monkeypatch.delenv(variable, raising=False)
    monkeypatch.setenv("PSP_LANGUAGES", str(ROOT / "configs" / "languages-shared-data.toml"))
    monkeypatch.setenv("PSP_PARANMT_URL", "/data/paranmt.txt.gz")
    with caplog.at_level(logging.WARNING, logger="assets.settings.resources"):
        offline = default_resources("/tmp/x")
    assert not [r for r in caplog.records if "PSP_PARANMT_URL" in r.getMessage()]
    assert offline["opus"].api_base is None and offline["opus"].api() == OPUS_API
    assert offline["paranmt"].url == EnvVar("PSP_PARANMT_URL")
    monkeypatch.delenv("PSP_PARANMT_URL")
    monkeypatch.delenv("PSP_LANGUAGES")
    with caplog.at_level(logging.WARNING, logger="assets.settings.resources"):
        online = default_resources("/tmp/x")
    assert online["opus"].api_base == OPUS_API and online["paranmt"].url is None
    [warning] = [r.getMessage() for r in caplog.records if "PSP_PARANMT_URL" in r.getMessage()]
    assert "\n" not in warning and "docs/corpus.md" in warning
    assert getattr(paranmt, "PARANMT_URL", None) is None
    with pytest.raises(paranmt.ParaNmtSourceError, match="PSP_PARANMT_URL") as caught:
        ParaNmtResource().source()
    assert "\n" not in str(caught.value)


def test_workspace_loads_the_definitions_module() -> None:
    text = (ROOT / "workspace.yaml").read_text()
    assert "python_module: pipelines.definitions" in text


def test_dagster_yaml_instance_settings(tmp_path: Path, monkeypatch) -> None:
    shutil.copy(ROOT / "configs" / "dagster.yaml", tmp_path / "dagster.yaml")
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path))
    instance = DagsterInstance.from_config(str(tmp_path))
    try:
        config = instance.get_concurrency_config()
        assert config.pool_config.default_pool_limit == 1
        assert config.pool_config.pool_granularity.value == "op"
        assert config.run_queue_config.max_concurrent_runs == 4
        assert instance.run_monitoring_enabled
        assert instance.run_monitoring_settings["free_slots_after_run_end_seconds"] > 0
        assert type(instance.run_storage).__name__ == "SqliteRunStorage"
        assert str(tmp_path) in str(instance.run_storage._conn_string)  # noqa: SLF001
    finally:
        instance.dispose()


def test_compute_workers_default_to_the_usable_cpus_capped() -> None:
    usable = len(os.sched_getaffinity(0))
    assert ComputeResource().worker_count() == max(1, min(usable, DEFAULT_MAX_WORKERS))
    assert ComputeResource(workers=3).worker_count() == 3
    assert ComputeResource(workers=0).worker_count() == 1


TRAINING_FIELDS = (
    "anneal_every", "batch_size", "dev_sts", "dim", "dropout", "epochs", "exports", "force", "lr",
    "lr_decay", "matryoshka_dims", "max_megabatch", "max_steps", "select_on_dev_suite",
)  # fmt: skip
EVALUATION_FIELDS = ("force", "speed_repeats", "sts17_tracks", "suites", "tatoeba_languages")
#: per asset: code version, kinds, resources it needs, its run config's fields, whether its op
#: retries. A change here is a change users see (a new code version reruns the stage; a config
#: field renamed breaks their run configs): update this table on purpose, never by accident.
ASSET_DECLARATIONS = {
    "raw_pairs": ("1", ("parquet",), ("io_manager", "opus", "paranmt", "storage"), ("force", "opus_versions"), True),
    "langid_filtered_pairs": ("2", ("parquet",), ("compute", "io_manager", "langid", "storage"), ("force", "threshold"), False),
    "length_filtered_pairs": ("1", ("parquet",), ("io_manager", "storage"), ("force",), False),
    "deduplicated_pairs": ("5", ("parquet",), ("compute", "io_manager", "storage"), ("force",), False),
    "retrain_plan": ("1", ("parquet",), ("io_manager", "storage"), ("force", "retrain"), False),
    "sentencepiece_model": ("1", ("sentencepiece",), ("compute", "io_manager", "profile", "storage"), ("force", "input_sentence_size", "vocab_size"), False),
    "training_data": ("1", ("hdf5",), ("compute", "io_manager", "storage"), ("force", "seed"), False),
    "psp_model": ("2", ("pytorch",), ("compute", "eval_data", "io_manager", "profile", "storage"), TRAINING_FIELDS, False),
    "model_evaluation": ("4", ("json",), ("eval_data", "io_manager", "profile", "storage"), EVALUATION_FIELDS, False),
    "evaluation_scoreboard": (None, ("markdown",), ("io_manager", "storage"), (), False),
    "multi_pairs": ("1", ("parquet",), ("io_manager", "storage"), ("force", "sampling_alpha"), False),
    "multi_retrain_plan": ("1", ("parquet",), ("io_manager", "storage"), ("force", "retrain"), False),
    "multi_sentencepiece_model": ("1", ("sentencepiece",), ("compute", "io_manager", "profile", "storage"), ("force", "input_sentence_size", "vocab_size"), False),
    "multi_training_data": ("1", ("hdf5",), ("compute", "io_manager", "storage"), ("force", "seed"), False),
    "multi_psp_model": ("1", ("pytorch",), ("compute", "eval_data", "io_manager", "profile", "storage"), TRAINING_FIELDS, False),
    "multi_evaluation": ("1", ("json",), ("eval_data", "io_manager", "profile", "storage"), EVALUATION_FIELDS, False),
}  # fmt: skip


def test_every_asset_is_declared_as_before():
    """What the stage factory declares for each asset, compared field by field with the table
    above (what the hand-written declarations it replaced declared)."""
    found = {}
    for spec in defs.resolve_all_asset_specs():
        name = spec.key.to_user_string()
        op = defs.resolve_assets_def(name).op
        schema = op.config_schema
        config = getattr(schema.config_type, "fields", None) if schema is not None else None
        found[name] = (
            spec.code_version,
            tuple(sorted(spec.kinds)),
            tuple(sorted(defs.resolve_assets_def(name).required_resource_keys)),
            tuple(sorted(config or ())),
            op.retry_policy is not None,
        )
    assert found == ASSET_DECLARATIONS
