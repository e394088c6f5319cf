"""Every run-config field an asset takes is described in the launchpad: the Dagster config
schema of each asset's op (what the UI shows) has a description for every field."""

from __future__ import annotations

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
