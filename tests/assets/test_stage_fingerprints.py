"""Each stage's fingerprint, for fixed inputs and settings, is the value the stage always gave.

The fingerprint is the stage's Dagster data version and decides whether a re-run reuses its
work: a refactoring that changed it would recompute (retrain) every user's stages. The values
below were computed once and are pinned: a change to one of them must be a deliberate change of
the stage (its code version, or what decides its output), never a side effect.

The data stages run on generated corpora served by the loopback OPUS server, with a registry
written here (so an edit of the shipped registry does not move them): de from three corpora,
one capped (the caps path of deduplicated_pairs). The registry's only language is de, so the
multilingual model's chain runs on de's pairs alone.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest
import yaml
from dagster import materialize

import psp_core.models.registry
from pipelines.definitions import defs
from tests.ops.opus_server import OpusServer, build_moses_zip
from tests.pipelines.conftest import loopback_resources
from tests.pipelines.corpora import publish_de, write_eval_dir

ROOT = Path(__file__).resolve().parents[2]
SMOKE = yaml.safe_load((ROOT / "configs" / "smoke.yaml").read_text())
DATA_STAGES = (
    "raw_pairs",
    "langid_filtered_pairs",
    "length_filtered_pairs",
    "deduplicated_pairs",
    "sentencepiece_model",
    "training_data",
)
MULTI_STAGES = ("multi_pairs", "multi_sentencepiece_model", "multi_training_data")
REGISTRY = (
    '[languages.de]\nsource = "opus"\ncorpora = [\n'
    '  { name = "OpenSubtitles", version = "v2018", cap = 100 },\n'
    '  { name = "Tanzil", version = "v1" },\n  { name = "GlobalVoices", version = "v2017q3" },\n]\n'
)
#: the settings a run may set, each away from its default
SETTINGS = {
    "ops": {
        "langid_filtered_pairs": {"config": {"threshold": 0.3}},
        "sentencepiece_model": {"config": {"vocab_size": 300, "input_sentence_size": 5000}},
        "training_data": {"config": {"seed": 7}},
        "multi_pairs": {"config": {"sampling_alpha": 0.7}},
        "multi_sentencepiece_model": {"config": {"vocab_size": 300}},
        "multi_training_data": {"config": {"seed": 7}},
    }
}

#: what the stages wrote before the asset layer was refactored; deduplicated_pairs and every
#: stage after it since it writes the dev suite's pool of distractors (its code version 5)
PINNED = {
    "smoke": {
        "raw_pairs": "ffd486c9455eb87f5bfebc49",
        "langid_filtered_pairs": "f66cdc52997a2e3f3f15a2cf",
        "length_filtered_pairs": "b75a2a2d6ccd2393ce59adb6",
        "deduplicated_pairs": "62a59fb335fa4f30622ceea8",
        "sentencepiece_model": "1d1a4d214477e5cb2604d444",
        "training_data": "6c65d697a0cfea76ef01812b",
        "multi_pairs": "0b29d06f4200be6b1fc2d50c",
        "multi_sentencepiece_model": "3c0a9028a18ca106fce871e7",
        "multi_training_data": "271311b09b8a4bbe9c6affdd",
    },
    "settings": {
        "raw_pairs": "ffd486c9455eb87f5bfebc49",
        "langid_filtered_pairs": "99f1ebfc9e75fe410a2fa110",
        "length_filtered_pairs": "4f578e60fcb6e12bb4b1c098",
        "deduplicated_pairs": "cdab644793fbea03002a0534",
        "sentencepiece_model": "24298dfe4cd3c3b789c6832c",
        "training_data": "63befb806148f85617fbc2c1",
        "multi_pairs": "3918970d91c00156d91918c6",
        "multi_sentencepiece_model": "44067da2496776b2817b5637",
        "multi_training_data": "fa9226eb5fb1282059ec50e7",
    },
}


def fingerprints(root: Path) -> dict[str, str]:
    """Each stage's fingerprint, from its ``manifest.json`` (the multilingual stages' by the
    asset's name; they are stored under the code ``multi``)."""

    def written(code: str, stage: str) -> str:
        return json.loads((root / code / stage / "manifest.json").read_text())["fingerprint"]

    found = {name: written("de", name) for name in DATA_STAGES}
    for name in MULTI_STAGES:
        stage = "deduplicated_pairs" if name == "multi_pairs" else name.removeprefix("multi_")
        found[name] = written("multi", stage)
    return found


@pytest.mark.slow
@pytest.mark.parametrize("run", sorted(PINNED))
def test_data_stage_fingerprints_are_unchanged(
    run: str, opus_server: OpusServer, tmp_path: Path, monkeypatch
) -> None:
    publish_de(opus_server, build_moses_zip)
    registry = tmp_path / "languages.toml"
    registry.write_text(REGISTRY)
    monkeypatch.setenv("PSP_LANGUAGES", str(registry))
    resources = loopback_resources(opus_server, tmp_path / "storage", tmp_path / "eval")

    def config(names: tuple[str, ...]) -> dict:
        ops = SETTINGS["ops"] if run == "settings" else {}
        return SMOKE | {"ops": {name: ops[name] for name in names if name in ops}}

    result = materialize(
        [defs.get_assets_def(name) for name in DATA_STAGES],
        partition_key="de",
        resources=resources,
        run_config=config(DATA_STAGES),
    )
    assert result.success
    multi = materialize(
        [defs.get_assets_def(name) for name in MULTI_STAGES],
        resources=resources,
        run_config=config(MULTI_STAGES),
    )
    assert multi.success
    assert fingerprints(tmp_path / "storage") == PINNED[run]


class _FrozenClock:
    """The ``time`` module with ``time()`` fixed."""

    def __getattr__(self, name: str):
        return getattr(time, name)

    def time(self) -> float:
        return 1_700_000_000.0


MODEL_STAGES = ("psp_model", "model_evaluation")
MULTI_MODEL_STAGES = ("multi_psp_model", "multi_evaluation")
#: the model stages' fingerprints (smoke profile) before the asset layer was refactored; all
#: since deduplicated_pairs writes the dev suite's pool of distractors (its code version 5)
PINNED_MODELS = {
    "psp_model": "9ada32bcfa0190d819a5893c",
    "model_evaluation": "2dfbc9b1d1a9544747457cec",
    "multi_psp_model": "3d8205363e8c7a9b8eea8115",
    "multi_evaluation": "18392b88547085f3de2042a3",
}


@pytest.mark.slow
def test_model_stage_fingerprints_are_unchanged(
    opus_server: OpusServer, tmp_path: Path, monkeypatch
) -> None:
    """psp_model's and model_evaluation's, of de and of the multilingual model. The evaluation
    data's files get fixed modification times (its signature is of names, sizes and times) and
    the model registry a fixed clock (the evaluation's key names the version, whose id starts
    with the time it was trained)."""
    monkeypatch.setattr(psp_core.models.registry, "time", _FrozenClock())
    publish_de(opus_server, build_moses_zip)
    registry = tmp_path / "languages.toml"
    registry.write_text(REGISTRY)
    monkeypatch.setenv("PSP_LANGUAGES", str(registry))
    write_eval_dir(tmp_path / "eval")
    for path in (tmp_path / "eval").rglob("*"):
        os.utime(path, ns=(1_700_000_000_000_000_000, 1_700_000_000_000_000_000))
    resources = loopback_resources(opus_server, tmp_path / "storage", tmp_path / "eval")
    stages = [defs.get_assets_def(name) for name in DATA_STAGES + MODEL_STAGES]
    result = materialize(stages, partition_key="de", resources=resources, run_config=SMOKE)
    assert result.success
    stages = [defs.get_assets_def(name) for name in MULTI_STAGES + MULTI_MODEL_STAGES]
    assert materialize(stages, resources=resources, run_config=SMOKE).success
    root = tmp_path / "storage"

    def written(code: str, stage: str) -> str:
        return json.loads((root / code / stage / "manifest.json").read_text())["fingerprint"]

    found = {name: written("de", name) for name in MODEL_STAGES}
    found["multi_psp_model"] = written("multi", "psp_model")
    found["multi_evaluation"] = written("multi", "model_evaluation")
    assert found == PINNED_MODELS
