"""psp_model with ``select_on_dev_suite``: each epoch scored on the dev suite's mean (STS 2017
en-en and the language's held-back pairs here), the best epoch kept, and the choice recorded; the
evaluation marks STS 2017 en-en as dev. Upstream stages are tests/conftest.py's toy ones."""

from __future__ import annotations

import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from assets.framework.stage import Stage, fingerprint
from assets.stages.psp_model import DEV_SUITE_SELECTION
from psp_core.evaluation.dev_suite import dev_mean
from psp_core.models.registry import ModelRegistry
from tests.assets.test_evaluation_scoreboard import TRAINING, materialize_model_and_evaluation
from tests.assets.test_evaluation_scoreboard import world as world  # (the fixture)


def commit_held_back_pairs(world: dict, toy) -> None:
    """de's deduplicated_pairs stage with 30 held-back pairs as its ``dev_pairs`` and 60 others
    as its ``dev_pool``."""
    stage = Stage(world["resources"]["storage"], "de", "deduplicated_pairs")
    outputs = {}
    for name, count, seed in (("dev_pairs", 30, 77), ("dev_pool", 60, 78)):
        pairs = toy.pairs(count, seed=seed)
        table = pa.table({"src": [a for a, _ in pairs], "tgt": [b for _, b in pairs]})
        pq.write_table(table, stage.path(f"{name}.parquet"))
        outputs[name] = f"{name}.parquet"
    stage.commit(fingerprint(stage="deduplicated_pairs"), outputs, {})


@pytest.mark.slow
def test_the_best_epoch_on_the_dev_suite_mean_is_kept_and_recorded(world, toy):
    commit_held_back_pairs(world, toy)
    materialize_model_and_evaluation(world, {**TRAINING, "epochs": 3, "select_on_dev_suite": True})

    manifest = json.loads((world["root"] / "de" / "psp_model" / "manifest.json").read_text())
    record = manifest["record"]
    assert record["model_selection"] == DEV_SUITE_SELECTION
    epoch_scores = [epoch["dev_score"] for epoch in record["history"]]
    assert len(epoch_scores) == 3 and all(score is not None for score in epoch_scores)
    assert record["best_dev_score"] == max(epoch_scores)
    assert record["best_epoch"] == epoch_scores.index(max(epoch_scores))
    # the model kept is the best epoch's: its dev suite (scored by the promotion gate on the
    # saved bundle) has that mean, and it includes the held-back pairs
    (version,) = ModelRegistry(world["root"] / "de" / "psp_model").versions()
    assert "held_back_de_error" in version.dev_scores and "sts17_en_en" in version.dev_scores
    assert abs(dev_mean(version.dev_scores) - record["best_dev_score"]) <= 0.02

    results = json.loads((world["root"] / "de" / "model_evaluation" / "results.json").read_text())
    assert results["sts17"]["en-en"]["dev"] is True and results["sts17"]["es-en"]["dev"] is False


def test_dev_mean_weighs_the_languages_together_as_one_sts_set():
    """Each language's retrieval counts as its accuracy (100 minus the error), all languages
    together as one STS set; a version scored before errors were kept has its accuracy."""
    scores = {"sts17_en_en": 80.0, "stsb_dev": 70.0, "held_back_de_error": 10.0}
    scores["held_back_fr_error"] = 0.0
    assert dev_mean(scores) == round((80 + 70 + 95) / 3, 2)
    assert dev_mean({"held_back_de_error": 10.0}) == 90.0
    assert dev_mean({"held_back_de": 90.0}) == 90.0
    assert dev_mean({}) is None
