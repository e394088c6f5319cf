"""Incremental retrains in the pipeline (assets.stages.retrain_plan), on small generated de bitext
served by the loopback OPUS server, with new bitext dropped into the inbox: an incremental
version trains on the new and replayed pairs only, from its parent's weights and with its
vocabulary, and says so; a vocabulary that no longer fits, ``retrain: full`` and a refused
incremental version give full retrains with the reason; a killed incremental training
resumes; the held-back pairs stay held back along the chain."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import xxhash
import yaml
from dagster import DagsterInstance, materialize

from assets.framework.stage import read_manifest
from assets.settings.languages import RetrainSettings
from assets.settings.profiles import ProfileResource
from assets.settings.resources import ComputeResource, EvaluationDataResource, StorageResource
from ops.pairs.pair_files import iter_pair_batches, iter_pairs
from ops.pairs.pair_lineage import pair_keys
from psp_core import load_model
from psp_core.models.registry import ModelRegistry
from psp_core.tokenization.tokenizer import sha256_file
from psp_core.training.training_file import TrainingFile
from tests.assets.kills import kill_at_first_checkpoint
from tests.assets.test_materialize import ALL_ASSETS, metadata_of
from tests.ops.opus_server import OpusServer, build_moses_zip
from tests.pipelines.conftest import loopback_resources
from tests.pipelines.corpora import (
    DE_EN_REGISTRY,
    english_german,
    paranmt_zip,
    publish_de,
    write_eval_dir,
)

ROOT = Path(__file__).resolve().parents[2]
SMOKE = yaml.safe_load((ROOT / "configs" / "smoke.yaml").read_text())
#: a checkpoint at every mega-batch boundary: a killed training leaves one early
REGISTRY = DE_EN_REGISTRY + "\n[languages.de.training]\ncheckpoint_every = 1\n"
#: Greek words among the German ones: German to language ID, unknown to the vocabulary
GREEK = ["ωμέγα", "θάλασσα", "ψυχή", "φως", "γλώσσα", "ξένος", "ζωή", "ήλιος"]


def with_config(asset: str, **settings) -> dict:
    ops = dict(SMOKE.get("ops", {}))
    ops[asset] = {"config": {**ops.get(asset, {}).get("config", {}), **settings}}
    return {**SMOKE, "ops": ops}


@pytest.fixture()
def registry_text() -> str:
    return REGISTRY


@pytest.fixture()
def world(opus_server: OpusServer, tmp_path: Path, monkeypatch, registry_text: str) -> dict:
    registry = tmp_path / "languages.toml"
    registry.write_text(registry_text)
    monkeypatch.setenv("PSP_LANGUAGES", str(registry))
    publish_de(opus_server, build_moses_zip)
    write_eval_dir(tmp_path / "eval")
    root = tmp_path / "storage"
    resources = loopback_resources(opus_server, root, tmp_path / "eval")
    return {"root": root, "resources": resources, "eval": tmp_path / "eval"}


def run(world: dict, config: dict = SMOKE, **options):
    result = materialize(
        ALL_ASSETS, partition_key="de", resources=world["resources"], run_config=config, **options
    )
    assert result.success
    return result


def drop_into_inbox(root: Path, name: str, english: list[str], german: list[str]) -> None:
    inbox = root / "inbox" / "de"
    inbox.mkdir(parents=True, exist_ok=True)
    (inbox / f"{name}.en").write_text("\n".join(english) + "\n")
    (inbox / f"{name}.de").write_text("\n".join(german) + "\n")


def stage_file(root: Path, stage: str, output: str) -> Path:
    return read_manifest(root / "de" / stage).output(output)


def pairs_of(path: Path) -> set[tuple[str, str]]:
    return set(iter_pairs(path))


def training_pairs(root: Path) -> set[tuple[str, str]]:
    return pairs_of(stage_file(root, "deduplicated_pairs", "pairs"))


def dev_pairs(root: Path) -> set[tuple[str, str]]:
    return pairs_of(stage_file(root, "deduplicated_pairs", "dev_pairs"))


def registry_of(root: Path) -> ModelRegistry:
    return ModelRegistry(root / "de" / "psp_model")


def table_checksum(bundle: Path) -> str:
    table = np.ascontiguousarray(load_model(bundle).weight.detach().numpy())
    return xxhash.xxh3_128(table).hexdigest()


@pytest.mark.slow
def test_new_bitext_trains_incrementally_from_the_promoted_version(world: dict):
    root = world["root"]
    run(world)
    [v1] = registry_of(root).versions()
    assert v1.retrain["mode"] == "full" and v1.train_pairs is not None
    seen, dev_before = training_pairs(root), dev_pairs(root)
    # the first version keeps the keys of every pair it trained on
    assert np.array_equal(
        np.load(v1.train_pairs), pair_keys(stage_file(root, "deduplicated_pairs", "pairs"))
    )

    drop_into_inbox(root, "week2", *english_german(300, seed=77))
    second = run(world)
    plan = metadata_of(second, "retrain_plan")
    assert plan["retrain_mode"] == "incremental" and plan["retrain_parent"] == v1.id
    now, dev_after = training_pairs(root), dev_pairs(root)
    new = now - seen
    assert len(new) > 50
    # the training file: every new pair and replayed pairs the parent saw, nothing else
    packed = stage_file(root, "retrain_plan", "pairs")
    trained_on = pairs_of(packed)
    assert new <= trained_on and trained_on - new <= seen
    replayed = trained_on - new
    assert 0 < len(replayed) < len(seen)
    with TrainingFile(stage_file(root, "training_data", "data")) as data:
        assert len(data) == len(trained_on)

    v1_again, v2 = registry_of(root).versions()
    assert v2.retrain == {
        "mode": "incremental",
        "parent": v1.id,
        "new_pairs": len(new),
        "replay_pairs": len(replayed),
        "reason": v2.retrain["reason"],
    }
    assert v1.id in v2.retrain["reason"]
    # the vocabulary's fit on held-back pairs of its time, kept with the vocabulary
    assert v1.info["vocabulary_fit"]["pairs"] == "held_back"
    assert v2.info["vocabulary_fit"] == v1.info["vocabulary_fit"]
    plan_fit = read_manifest(root / "de" / "retrain_plan").record["vocabulary_fit"]
    assert plan_fit["reference"] == v1.info["vocabulary_fit"]
    model = metadata_of(second, "psp_model")
    assert (model["retrain_mode"], model["retrain_parent"]) == ("incremental", v1.id)
    assert model["retrain_new_pairs"] == len(new)
    # the parent's vocabulary, its weights as the start
    assert sha256_file(v2.bundle / "sentencepiece.model") == sha256_file(
        v1.bundle / "sentencepiece.model"
    )
    assert metadata_of(second, "sentencepiece_model")["sha256"] == sha256_file(
        v1.bundle / "sentencepiece.model"
    )
    assert_continues(v1, v2)
    # the steps follow the new data: one epoch of the new and replayed pairs
    assert model["steps"] <= -(-len(trained_on) // 32)
    # the lineage's pairs: the parent's and the new ones
    lineage = np.load(v2.train_pairs)
    assert len(lineage) == len(seen | now)
    assert np.isin(np.load(v1.train_pairs), lineage).all()
    # the held-back pairs: those of the first run stay held back, none was ever trained on
    assert dev_before <= dev_after
    assert not dev_after & (seen | now)

    # unchanged inputs: every stage reused, no third version
    again = run(world)
    assert all(metadata_of(again, name)["reused"] for name in ("retrain_plan", "psp_model"))
    assert len(registry_of(root).versions()) == 2

    # retrain: full asks for a full retrain of the same pairs, with a vocabulary of its own
    full = run(world, with_config("retrain_plan", retrain="full"))
    assert metadata_of(full, "retrain_plan")["retrain_mode"] == "full"
    spm = metadata_of(full, "sentencepiece_model")
    assert (
        not spm["reused"]
        and "copied_from" not in read_manifest(root / "de/sentencepiece_model").record
    )
    v3 = registry_of(root).versions()[-1]
    assert v3.retrain["mode"] == "full" and v3.retrain["parent"] is None
    assert "retrain: full was asked for" in v3.retrain["reason"]
    with TrainingFile(stage_file(root, "training_data", "data")) as data:
        assert len(data) == len(now) == v3.retrain["new_pairs"]
    assert dev_pairs(root) == dev_after


def assert_continues(parent, version) -> None:
    """``version`` started from ``parent``'s weights, at the registry's share of a full
    training's rate (``parent``'s, a full retrain)."""
    training = json.loads((version.bundle / "config.json").read_text())["training"]
    assert training["init_from"]["embeddings_xxh3_128"] == table_checksum(parent.bundle)
    first = json.loads((parent.bundle / "config.json").read_text())["training"]
    scale = RetrainSettings().lr_scale
    assert training["config"]["lr"] == pytest.approx(first["config"]["lr"] * scale)
    # the version says where its rate came from: the profile's, scaled for the retrain
    lr_from = version.info["record"]["settings_from"]["lr"]
    assert lr_from.startswith("profile smoke") and f"x {scale} ([retrain] lr_scale" in lr_from


def drop_greek(root: Path) -> None:
    """New pairs whose German sides end in Greek words the vocabulary never saw."""
    english, german = english_german(200, seed=78)
    rng = np.random.default_rng(0)
    german = [f"{s[:-1]} {' '.join(rng.choice(GREEK, 3))}." for s in german]
    drop_into_inbox(root, "greek", english, german)


@pytest.mark.slow
def test_a_vocabulary_that_no_longer_fits_gives_a_full_retrain(world: dict):
    root = world["root"]
    run(world)
    [v1] = registry_of(root).versions()
    drop_greek(root)
    second = run(world)
    plan = metadata_of(second, "retrain_plan")
    assert plan["retrain_mode"] == "full", plan
    assert "no longer fits" in plan["retrain_reason"]
    fit = plan["vocabulary_fit"]
    # measured against the held-back pairs: text the vocabulary never saw either
    assert fit["reference"]["pairs"] == "held_back"
    assert fit["new"]["unknown_share"] > fit["reference"]["unknown_share"] + 0.05, fit
    v2 = registry_of(root).versions()[-1]
    assert v2.retrain["mode"] == "full" and v2.retrain["parent"] is None
    assert "no longer fits" in v2.retrain["reason"] and v1.id in v2.retrain["reason"]
    assert metadata_of(second, "psp_model")["retrain_mode"] == "full"


@pytest.mark.slow
def test_retrain_incremental_continues_even_where_the_vocabulary_no_longer_fits(world: dict):
    """``retrain: incremental`` is the user's choice over ``auto``'s rules, the vocabulary's
    fit among them: recorded, not acted on."""
    root = world["root"]
    run(world)
    [v1] = registry_of(root).versions()
    drop_greek(root)
    second = run(world, with_config("retrain_plan", retrain="incremental"))
    plan = metadata_of(second, "retrain_plan")
    assert plan["retrain_mode"] == "incremental" and "vocabulary_fit" in plan, plan
    assert registry_of(root).versions()[-1].retrain["parent"] == v1.id


@pytest.mark.slow
@pytest.mark.parametrize(
    "registry_text",
    # one incremental version in a row at most; every version promoted
    [
        REGISTRY
        + "[languages.de.retrain]\nfull_every = 1\n[languages.de.promotion]\ntolerance = 100.0\n"
    ],
)
def test_full_every_incremental_versions_in_a_row_give_a_full_retrain(world: dict):
    root = world["root"]
    run(world)
    drop_into_inbox(root, "week2", *english_german(200, seed=77))
    second = metadata_of(run(world), "psp_model")
    assert (second["retrain_mode"], second["promotion"]) == ("incremental", "promoted")
    drop_into_inbox(root, "week3", *english_german(200, seed=79))
    third = metadata_of(run(world), "retrain_plan")
    assert third["retrain_mode"] == "full"
    assert "1 incremental versions in a row" in third["retrain_reason"]
    assert "full_every 1" in third["retrain_reason"]


@pytest.mark.slow
def test_a_refused_incremental_version_gives_a_full_retrain(world: dict):
    root = world["root"]
    run(world)
    drop_into_inbox(root, "week2", *english_german(200, seed=77))
    # a learning rate that wrecks the model: the gate refuses the incremental version
    refused = run(world, with_config("psp_model", lr=100.0))
    assert metadata_of(refused, "psp_model")["retrain_mode"] == "incremental"
    assert metadata_of(refused, "psp_model")["promotion"] == "not promoted"
    drop_into_inbox(root, "week3", *english_german(200, seed=79))
    after = metadata_of(run(world), "retrain_plan")
    assert after["retrain_mode"] == "full"
    assert "the gate refused the last incremental version" in after["retrain_reason"]


def materialize_model(root: str, eval_dir: str) -> None:
    """psp_model alone (its upstream stages are there), with a long incremental training:
    the work of the process the kill test kills."""
    materialize(
        [ALL_ASSETS_BY_NAME()["psp_model"]],
        partition_key="de",
        resources={
            "storage": StorageResource(root=root),
            "compute": ComputeResource(device="cpu", threads=1, workers=1),
            "eval_data": EvaluationDataResource(eval_dir=eval_dir),
            "profile": ProfileResource(),
        },
        run_config=LONG,
    )


def ALL_ASSETS_BY_NAME() -> dict:  # noqa: N802 (read at call time, in the killed process)
    return {a.key.to_user_string(): a for a in ALL_ASSETS}


LONG = with_config("psp_model", epochs=40)


@pytest.mark.slow
def test_a_killed_incremental_retrain_resumes_with_the_same_lineage(world: dict):
    root = world["root"]
    run(world, LONG)
    [v1] = registry_of(root).versions()
    drop_into_inbox(root, "week2", *english_german(300, seed=77))
    upstream = [a for a in ALL_ASSETS if a.key.to_user_string() not in ("psp_model",)]
    upstream = [a for a in upstream if a.key.to_user_string() != "model_evaluation"]
    assert materialize(
        upstream, partition_key="de", resources=world["resources"], run_config=SMOKE
    ).success
    planned = read_manifest(root / "de" / "retrain_plan").record
    assert planned["mode"] == "incremental"

    code = (
        "import sys; from tests.assets.test_incremental_retrain import materialize_model as m;"
        " m(sys.argv[1], sys.argv[2])"
    )
    model_dir = root / "de" / "psp_model"
    kill_at_first_checkpoint(code, [str(root), str(world["eval"])], model_dir, 240)
    assert len(registry_of(root).versions()) == 1  # no half version

    instance = DagsterInstance.ephemeral()
    resumed = run(world, LONG, instance=instance)
    said = [e.user_message for e in instance.all_logs(resumed.run_id) if e.user_message]
    assert any("resuming from" in line for line in said), said
    assert metadata_of(resumed, "retrain_plan")["reused"]
    _, v2 = registry_of(root).versions()
    assert v2.retrain["mode"] == "incremental" and v2.retrain["parent"] == v1.id
    assert (v2.retrain["new_pairs"], v2.retrain["replay_pairs"]) == (
        planned["new_pairs"],
        planned["replay_pairs"],
    )
    assert_continues(v1, v2)


MULTI_REGISTRY = REGISTRY + '\n[multi]\nlanguages = ["de", "en"]\n'
PREPARE = ["raw_pairs", "langid_filtered_pairs", "length_filtered_pairs", "deduplicated_pairs"]
MULTI = [
    "multi_pairs",
    "multi_retrain_plan",
    "multi_sentencepiece_model",
    "multi_training_data",
    "multi_psp_model",
]


@pytest.mark.slow
@pytest.mark.parametrize("registry_text", [MULTI_REGISTRY])
def test_the_multilingual_model_retrains_incrementally_too(world: dict, opus_server):
    from pipelines.definitions import defs

    opus_server.add_file("/para-nmt-50m.zip", paranmt_zip(400))
    root, resources = world["root"], world["resources"]
    prepare = [defs.get_assets_def(name) for name in PREPARE]
    multi = [defs.get_assets_def(name) for name in MULTI]
    for code in ("de", "en"):
        assert materialize(prepare, partition_key=code, resources=resources).success, code
    first = materialize(multi, resources=resources, run_config=SMOKE)
    assert first.success
    assert metadata_of(first, "multi_retrain_plan")["retrain_mode"] == "full"
    registry = ModelRegistry(root / "multi" / "psp_model")
    [v1] = registry.versions()

    drop_into_inbox(root, "week2", *english_german(300, seed=77))
    assert materialize(prepare, partition_key="de", resources=resources).success
    second = materialize(multi, resources=resources, run_config=SMOKE)
    assert second.success
    plan = metadata_of(second, "multi_retrain_plan")
    assert (plan["retrain_mode"], plan["retrain_parent"]) == ("incremental", v1.id), plan[
        "retrain_reason"
    ]
    # the new and replayed pairs keep their language (the mining groups of the packed file)
    packed = read_manifest(root / "multi" / "retrain_plan").output("pairs")
    languages = {lang for batch in iter_pair_batches(packed) for lang in batch["lang"].to_pylist()}
    assert "de" in languages
    _, v2 = registry.versions()
    assert v2.retrain["mode"] == "incremental" and v2.retrain["parent"] == v1.id
    assert v2.retrain["new_pairs"] == plan["new_pairs"] > 0
    assert sha256_file(v2.bundle / "sentencepiece.model") == sha256_file(
        v1.bundle / "sentencepiece.model"
    )
    with TrainingFile(read_manifest(root / "multi" / "training_data").output("data")) as data:
        assert len(data) == plan["new_pairs"] + plan["replay_pairs"]


FROM_MULTI_REGISTRY = MULTI_REGISTRY + '\n[languages.de.retrain]\ninit_from = "multi"\n'


@pytest.mark.slow
@pytest.mark.parametrize("registry_text", [FROM_MULTI_REGISTRY])
def test_a_languages_model_can_start_from_the_multilingual_one(world: dict, opus_server):
    """``init_from = "multi"``: without a multilingual model the language's model starts from
    random weights (and says so); once one is promoted, a full retrain starts from its weights
    and vocabulary, and the next new bitext continues the language's own version."""
    from pipelines.definitions import defs

    opus_server.add_file("/para-nmt-50m.zip", paranmt_zip(400))
    root, resources = world["root"], world["resources"]
    first = run(world)
    plan = metadata_of(first, "retrain_plan")
    assert plan["retrain_mode"] == "full" and "no promoted multilingual model" in plan["init_from"]
    [own] = registry_of(root).versions()
    assert "from scratch" in own.retrain["reason"]

    prepare = [defs.get_assets_def(name) for name in PREPARE]
    assert materialize(prepare, partition_key="en", resources=resources).success
    multi = [defs.get_assets_def(name) for name in MULTI]
    assert materialize(multi, resources=resources, run_config=SMOKE).success
    [multi_version] = ModelRegistry(root / "multi" / "psp_model").versions()

    second = run(world, with_config("retrain_plan", retrain="full"))
    plan = metadata_of(second, "retrain_plan")
    assert plan["retrain_mode"] == "full" and multi_version.id in plan["init_from"]
    started = registry_of(root).versions()[-1]
    assert started.retrain["parent"] is None and multi_version.id in started.retrain["reason"]
    assert sha256_file(started.bundle / "sentencepiece.model") == sha256_file(
        multi_version.bundle / "sentencepiece.model"
    )
    training = json.loads((started.bundle / "config.json").read_text())["training"]
    assert training["init_from"]["embeddings_xxh3_128"] == table_checksum(multi_version.bundle)

    drop_into_inbox(root, "week2", *english_german(300, seed=77))
    third = run(world)
    plan = metadata_of(third, "retrain_plan")
    assert (plan["retrain_mode"], plan["retrain_parent"]) == ("incremental", started.id)
    assert "init_from" not in plan  # (an incremental retrain continues its own version)
