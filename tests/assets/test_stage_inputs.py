"""A stage's inputs are declared once, in ``stage_asset``: Dagster's dependencies are derived from
them, and the plan and report read exactly those (``run.inputs.<stage>``); a name the stage did
not declare is an error naming those it did, before anything is read."""

from __future__ import annotations

from pathlib import Path

import pytest

from assets.framework.stage import Stage, StageInputMissing
from assets.framework.stage_asset import StageInputs
from assets.settings.resources import StorageResource
from pipelines.definitions import defs


def test_a_declared_input_is_read_once_and_an_undeclared_one_is_named(tmp_path: Path) -> None:
    storage = StorageResource(root=str(tmp_path))
    spm = Stage(storage, "de", "sentencepiece_model")

    def compute() -> tuple[dict, dict]:
        spm.path("m").write_text("m")
        return {"model": "m"}, {"n": 1}

    spm.run("fp", compute)
    inputs = StageInputs(
        Stage(storage, "de", "training_data"), ("sentencepiece_model", "raw_pairs")
    )
    first = inputs.sentencepiece_model
    assert first.fingerprint == "fp" and inputs.sentencepiece_model is first  # read once
    with pytest.raises(AttributeError, match=r"declares no input 'psp_model'.*raw_pairs"):
        inputs.psp_model  # noqa: B018
    with pytest.raises(StageInputMissing, match="materialize raw_pairs"):
        inputs.raw_pairs  # noqa: B018


def test_every_stage_depends_on_what_it_declares() -> None:
    """The multilingual chain's stages read the shared stages' directories through their own
    ``multi_*`` assets; the per-language ones through the assets of the same name."""
    graph = defs.resolve_asset_graph()
    deps = {key.to_user_string(): {p.to_user_string() for p in graph.get(key).parent_keys}
            for key in graph.get_all_asset_keys()}  # fmt: skip
    assert deps["training_data"] == {"deduplicated_pairs", "retrain_plan", "sentencepiece_model"}
    assert deps["multi_training_data"] == {
        "multi_pairs",
        "multi_retrain_plan",
        "multi_sentencepiece_model",
    }
    assert deps["multi_pairs"] == {"deduplicated_pairs"}
    assert deps["deduplicated_pairs"] == {"length_filtered_pairs"}  # (its report reads more)
