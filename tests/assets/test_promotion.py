"""The promotion gate in the pipeline: a retrain made worse on purpose (a learning rate
of 100) is kept as a version but not promoted; the language's model, its evaluation and its
exports stay the earlier version's; promoting it by hand swaps it in, and rollback brings the
first back."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

import numpy as np
import pytest
import yaml
from dagster import materialize

from assets.framework.stage import read_manifest
from assets.lifecycle.model_versions import DevPairs, run_gate
from assets.settings.languages import PromotionSettings
from psp_core import load_model
from psp_core.cli import main
from psp_core.evaluation.dev_suite import dev_scores
from psp_core.models.registry import ModelRegistry, retrain_record
from psp_core.training.training_file import TrainingFile
from tests.assets.test_materialize import ALL_ASSETS, check_outcomes, metadata_of
from tests.ops.opus_server import OpusServer, build_moses_zip
from tests.pipelines.conftest import loopback_resources
from tests.pipelines.corpora import english_german, publish_de, write_eval_dir
from tests.psp_core.models.test_registry import damage

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
    # both trained from scratch on every pair of the training file, the lineage says so
    data = read_manifest(tmp_path / "storage" / "de" / "training_data").output("data")
    with TrainingFile(data) as training_file:
        n_pairs = len(training_file)
    first_retrain, second_retrain = (v.retrain for v in registry.versions())
    assert first_retrain == retrain_record(
        "full",
        parent=None,
        new_pairs=n_pairs,
        replay_pairs=0,
        reason="no promoted version: trained from scratch",
    )
    assert second_retrain["mode"] == "full" and second_retrain["parent"] is None
    assert good["version"] in second_retrain["reason"]  # the version the gate compared it with
    assert (good["retrain_mode"], good["retrain_parent"], good["retrain_new_pairs"]) == (
        "full",
        "none",
        n_pairs,
    )
    assert bad["retrain_reason"] == second_retrain["reason"] and bad["retrain_replay_pairs"] == 0
    # rerunning the worse settings does not train again, nor decide again
    rerun = materialize(
        ALL_ASSETS, partition_key="de", resources=resources, run_config=with_training(lr=WORSE_LR)
    )
    assert metadata_of(rerun, "psp_model")["reused"]
    assert metadata_of(rerun, "psp_model")["promotion"] == "decided before"
    # ...and says what was decided, why, on which scores
    assert metadata_of(rerun, "psp_model")["promotion_decided"].startswith("reject at ")
    assert "worse than the promoted version" in metadata_of(rerun, "psp_model")["promotion_reason"]
    assert "| sts17_en_en | higher (x 100) |" in metadata_of(rerun, "psp_model")["promotion_scores"]
    assert "Tolerance " in metadata_of(rerun, "psp_model")["promotion_scores"]  # (still said)
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
    dev_suite = {"sts17_en_en", "stsb_dev", "held_back_de_error"}
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


@pytest.mark.slow
def test_the_server_follows_the_gate_and_the_hand_promotions(opus_server: OpusServer, tmp_path):
    """The issue's end-to-end: psp serve over the pipeline's storage keeps answering with the
    first model through a worse retrain, swaps in the second when it is promoted by hand, under
    load, and the first again on rollback, with no failed request."""
    from tests.psp_core.serving.test_serve import Server, cosines

    publish_de(opus_server, build_moses_zip)
    write_eval_dir(tmp_path / "eval")
    storage = tmp_path / "storage"
    resources = loopback_resources(opus_server, storage, tmp_path / "eval")
    assert materialize(
        ALL_ASSETS, partition_key="de", resources=resources, run_config=SMOKE
    ).success
    registry = ModelRegistry(storage / "de" / "psp_model")
    [good] = registry.versions()
    sentences = [s for pair in zip(*english_german(8, seed=11), strict=True) for s in pair]
    want = {"good": load_model(good.bundle).embed(sentences)}
    server = Server("--storage-root", str(storage), "--reload-interval", "0.2")
    try:
        client = server.client()

        def served() -> str:
            data = client.embeddings.create(model="de", input=sentences).data
            got = np.array([item.embedding for item in data])
            matches = [name for name, w in want.items() if cosines(got, w).min() >= 0.9999]
            assert len(matches) == 1, matches
            return matches[0]

        assert served() == "good"
        worse = materialize(
            ALL_ASSETS,
            partition_key="de",
            resources=resources,
            run_config=with_training(lr=WORSE_LR),
        )
        assert metadata_of(worse, "psp_model")["promotion"] == "not promoted"
        bad = registry.version(metadata_of(worse, "psp_model")["version"])
        want["bad"] = load_model(bad.bundle).embed(sentences)
        time.sleep(1.0)  # five reload checks
        assert served() == "good"

        seen, failures, stop = [], [], threading.Event()

        def load() -> None:
            while not stop.is_set():
                try:
                    seen.append(served())
                except Exception as error:  # noqa: BLE001 (every failure counts)
                    failures.append(repr(error))

        clients = [threading.Thread(target=load) for _ in range(4)]
        for thread in clients:
            thread.start()
        try:
            time.sleep(0.5)
            storage_flag = ["--storage-root", str(storage)]
            assert main(["models", "promote", "de", bad.id, *storage_flag]) == 0
            _wait_for(seen, "bad")
            assert main(["models", "rollback", "de", *storage_flag]) == 0
            _wait_for(seen, "good")
        finally:
            stop.set()
            for thread in clients:
                thread.join()
        assert failures == []
        assert seen.count("bad") > 0 and seen[-1] == "good"
    finally:
        server.stop()


def _wait_for(seen: list[str], name: str, seconds: float = 20.0) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if seen and seen[-1] == name:
            time.sleep(0.3)
            return
        time.sleep(0.05)
    raise AssertionError(f"the server never answered with {name!r}")


NO_PAIRS = DevPairs(held_back={}, pools={})


def test_the_gate_verifies_the_bundle_before_it_moves_the_link(tmp_path, model):
    """A candidate whose weights were cut short is not promoted, whatever its recorded dev
    scores (they were taken before the damage); a promoted version that no longer loads is
    replaced by a candidate that does, whatever its scores."""
    write_eval_dir(tmp_path / "eval")
    registry = ModelRegistry(tmp_path / "de" / "psp_model")
    first = registry.add_version("a" * 24, lambda path: (model.save(path), {})[1])
    registry.promote(first.id, reason="first")
    names = dev_scores(load_model(first.bundle), tmp_path / "eval")
    assert names  # the generated evaluation data gives the gate scores to compare

    def version(fingerprint: str, score: float):
        return registry.add_version(
            fingerprint,
            lambda path: (model.save(path), {"dev_scores": dict.fromkeys(names, score)})[1],
        )

    better = version("b" * 24, 100.0)
    damage(better.bundle)
    decision, line = run_gate(registry, better, tmp_path / "eval", PromotionSettings(), NO_PAIRS)
    assert not decision.promote and "does not verify" in line and "truncated" in line
    assert registry.promoted() == first
    assert registry.history()[-1]["action"] == "reject"

    worse = version("c" * 24, -100.0)
    damage(first.bundle)
    decision, line = run_gate(registry, worse, tmp_path / "eval", PromotionSettings(), NO_PAIRS)
    assert decision.promote and f"the promoted version {first.id} no longer loads" in line
    assert registry.promoted() == worse
