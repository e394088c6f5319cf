"""Every run-config field an asset takes is described in the launchpad: the Dagster config
schema of each asset's op (what the UI shows) has a description for every field."""

from __future__ import annotations

from assets.settings.config import TrainingDataConfig
from assets.settings.resources import ComputeResource, OpusResource
from pipelines.definitions import defs


def test_every_config_field_of_every_asset_has_a_description() -> None:
    graph = defs.get_repository_def().asset_graph
    missing, checked = [], set()
    for key in graph.get_all_asset_keys():
        schema = defs.get_assets_def(key).op.config_schema
        fields = getattr(getattr(schema, "config_type", None), "fields", None)
        for name, field in (fields or {}).items():
            checked.add(f"{key.to_user_string()}.{name}")
            if not field.description:
                missing.append(f"{key.to_user_string()}.{name}")
    assert {"psp_model.lr", "psp_model.batch_size", "model_evaluation.speed_repeats"} <= checked
    assert missing == []


def test_built_in_values_show_as_null_in_the_launchpad_and_hold_in_the_code() -> None:
    """A null_default field: the schema's default is null (the launchpad leaves it out, its
    description says what null means), the code reads the built-in value, set or not."""
    schema = defs.get_assets_def("training_data").op.config_schema.config_type.fields
    assert schema["seed"].default_value is None and schema["force"].default_value is None
    assert "Null: 1." in schema["seed"].description
    assert TrainingDataConfig().seed == 1 and TrainingDataConfig(seed=None).seed == 1
    assert TrainingDataConfig(seed=7).seed == 7 and TrainingDataConfig().force is False
    assert ComputeResource().device == "auto" and ComputeResource(device="cpu").device == "cpu"
    assert OpusResource().retries == 5 and OpusResource(retries=0).retries == 0


def test_stage_settings_are_typed_plainly_in_the_launchpad() -> None:
    """Int, Float, String, Bool (null where allowed), not Dagster's ``Int | { env: String }``:
    no stage setting is read from an environment variable."""
    graph = defs.get_repository_def().asset_graph
    kinds = {}
    for key in graph.get_all_asset_keys():
        schema = defs.get_assets_def(key).op.config_schema
        for name, field in (getattr(schema.config_type, "fields", None) or {}).items():
            kinds[f"{key.to_user_string()}.{name}"] = field.config_type.key
    assert kinds["psp_model.epochs"] == "Noneable.Int"
    assert kinds["psp_model.exports"] == "Array.String"
    assert kinds["raw_pairs.opus_versions"] == "Map.String.String"
    sources = {name: kind for name, kind in kinds.items() if "Source" in kind}
    assert sources == {}
