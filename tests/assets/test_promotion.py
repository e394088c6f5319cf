"""The promotion gate in the pipeline (issue 27): a retrain made worse on purpose (a learning rate
of 100) is kept as a version but not promoted; the language's model, its evaluation and its
exports stay the earlier version's; promoting it by hand swaps it in, and rollback brings the
first back."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import yaml
from dagster import materialize

from psp_core import load_model
from psp_core.cli import main
from psp_core.registry import ModelRegistry
from tests.assets.test_materialize import ALL_ASSETS, check_outcomes, metadata_of
from tests.ops.opus_server import OpusServer, build_moses_zip
from tests.pipelines.conftest import loopback_resources
from tests.pipelines.corpora import english_german, publish_de, write_eval_dir

ROOT = Path(__file__).resolve().parents[2]
SMOKE = yaml.safe_load((ROOT / "configs" / "smoke.yaml").read_text())
#: a learning rate that wrecks the smoke model (1e-6 leaves it at its random start, which on the
#: generated evaluation data scores as well as 14 steps of training: no test of the gate)
WORSE_LR = 100.0


def with_training(**settings) -> dict:
    ops = dict(SMOKE.get("ops", {}))
    ops["psp_model"] = {"config": {**ops.get("psp_model", {}).get("config", {}), **settings}}
    return {**SMOKE, "ops": ops}


def table(path: Path) -> np.ndarray:
    return load_model(path).weight.detach().numpy()


def test_a_worse_retrain_is_kept_but_not_promoted(opus_server: OpusServer, tmp_path, capsys):
    publish_de(opus_server, build_moses_zip)
    write_eval_dir(tmp_path / "eval")
    resources = loopback_resources(opus_server, tmp_path / "storage", tmp_path / "eval")
    language_model = tmp_path / "storage" / "de" / "psp_model" / "model"

    first = materialize(ALL_ASSETS, partition_key="de", resources=resources, run_config=SMOKE)
    assert first.success
    good = metadata_of(first, "psp_model")
    assert good["promotion"] == "promoted" and good["promoted_version"] == good["version"]
    good_table = table(language_model)
    good_eval = json.loads((tmp_path / "storage/de/model_evaluation/results.json").read_text())

    worse = materialize(
        ALL_ASSETS, partition_key="de", resources=resources, run_config=with_training(lr=WORSE_LR)
    )
    assert worse.success  # a model the gate keeps out is not a failed run...
    bad = metadata_of(worse, "psp_model")
    assert bad["promotion"] == "not promoted", bad  # ...but it says so, with both scores
    assert bad["promoted_version"] == good["version"] != bad["version"]
    assert "worse than the promoted version" in bad["promotion_reason"]
    assert "| sts17_en_en |" in bad["promotion_scores"]
    assert check_outcomes(worse)["model_promoted"] is False  # the warning the UI shows
    # the language's model, its evaluation: still the first version's
    np.testing.assert_array_equal(table(language_model), good_table)
    assert metadata_of(worse, "model_evaluation")["reused"]
    again = json.loads((tmp_path / "storage/de/model_evaluation/results.json").read_text())
    assert again == good_eval

    registry = ModelRegistry(tmp_path / "storage" / "de" / "psp_model")
    assert [v.id for v in registry.versions()] == [good["version"], bad["version"]]
    # rerunning the worse settings does not train again, nor decide again
    rerun = materialize(
        ALL_ASSETS, partition_key="de", resources=resources, run_config=with_training(lr=WORSE_LR)
    )
    assert metadata_of(rerun, "psp_model")["reused"]
    assert metadata_of(rerun, "psp_model")["promotion"] == "decided before"
    np.testing.assert_array_equal(table(language_model), good_table)

    # promoted by hand: the language's model is the new version; rollback brings the first back
    storage = ["--storage-root", str(tmp_path / "storage")]
    assert main(["models", "promote", "de", bad["version"], *storage]) == 0
    assert not np.array_equal(table(language_model), good_table)
    assert main(["models", "list", "de", "--json", *storage]) == 0
    out = capsys.readouterr().out
    rows = json.loads(out[out.index("{") :])["versions"]
    assert [(r["version"], r["promoted"], r["decision"]) for r in rows] == [
        (good["version"], False, "promote"),
        (bad["version"], True, "promote"),
    ]
    # test scores: of the evaluated version only (the gate's are the dev ones, of both)
    assert "tatoeba_deu_error" in rows[0]["test_scores"] and rows[1]["test_scores"] == {}
    dev_suite = {"sts17_en_en", "stsb_dev", "held_back_de"}
    assert set(rows[0]["dev_scores"]) == set(rows[1]["dev_scores"]) == dev_suite
    assert main(["models", "rollback", "de", *storage]) == 0
    np.testing.assert_array_equal(table(language_model), good_table)
    # the next scheduled run does not promote the version rolled back by hand
    after = materialize(
        ALL_ASSETS, partition_key="de", resources=resources, run_config=with_training(lr=WORSE_LR)
    )
    assert metadata_of(after, "psp_model")["promoted_version"] == good["version"]
    np.testing.assert_array_equal(table(language_model), good_table)
    sentences = [s for pair in zip(*english_german(5, seed=3), strict=True) for s in pair]
    assert load_model(language_model).embed(sentences).shape == (10, 32)
