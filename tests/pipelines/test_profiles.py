"""Profiles (smoke, demo, paper): one field picks them, they fill only what a run leaves unset,
and every profile runs for every language of the shared-data registry."""

from __future__ import annotations

import gzip
import json
import re
from datetime import UTC, datetime
from itertools import islice
from pathlib import Path

import pytest
import yaml
from dagster import DagsterInstance, build_schedule_context, materialize

from assets.settings.languages import load_registry
from assets.settings.profiles import (
    PROFILE_SETTINGS,
    Profile,
    ProfileResource,
    profile_from_environment,
    retrain_run_config,
)
from assets.settings.resources import (
    ComputeResource,
    EvaluationDataResource,
    LanguageIdResource,
    OpusResource,
    ParaNmtResource,
    StorageResource,
    default_resources,
)
from pipelines.definitions import defs
from pipelines.schedules import weekly_retrain_schedule
from psp_core import load_model
from psp_core.models.registry import ModelRegistry
from tests.conftest import require_shared_data
from tests.pipelines.conftest import LANGUAGE_STAGES

ROOT = Path(__file__).resolve().parents[2]
SHARED_REGISTRY = ROOT / "configs" / "languages-shared-data.toml"
#: pairs per language in the small copy of the shared data the profiles run on
SMALL = 1500
#: sentences the multilingual model's 20k-50k vocabularies are trained on in these runs
SPM_SAMPLE = 6000


def test_a_run_value_wins_over_the_profile_and_the_profile_over_the_registry() -> None:
    demo = ProfileResource(name=Profile.demo)
    assert demo.settings("psp_model", {"epochs": 3, "lr": None, "dim": None}) == {
        "epochs": 3,  # the run's
        "lr": 0.05,  # the profile's
    }  # dim: neither, so the registry's
    assert ProfileResource().name == Profile.paper
    assert ProfileResource().settings("psp_model", {"dim": None}) == {}


def test_every_profile_gives_a_valid_training_config_for_every_registered_language(
    monkeypatch,
) -> None:
    for registry in (ROOT / "assets" / "languages.toml", SHARED_REGISTRY):
        monkeypatch.setenv("PSP_LANGUAGES", str(registry))
        registry = load_registry()
        for spec in (registry[code] for code in registry.codes):
            for profile in Profile:
                settings = ProfileResource(name=profile).settings("psp_model", {})
                config = spec.train_config(**settings)
                assert config.dim == settings.get("dim", 1024), (spec.code, profile)


def test_the_profile_comes_from_psp_profile_and_a_wrong_name_is_a_clear_error(
    monkeypatch,
) -> None:
    monkeypatch.setenv("PSP_PROFILE", "demo")
    assert default_resources("/tmp/x")["profile"].name == Profile.demo
    monkeypatch.setenv("PSP_PROFILE", "fast")
    with pytest.raises(
        ValueError, match=r"PSP_PROFILE='fast' is not a profile.*smoke, demo, paper"
    ):
        profile_from_environment()
    monkeypatch.delenv("PSP_PROFILE")
    assert profile_from_environment() == Profile.paper


def test_scheduled_retraining_uses_the_paper_profile_whatever_the_interactive_default(
    monkeypatch,
) -> None:
    monkeypatch.setenv("PSP_PROFILE", "smoke")
    monkeypatch.setenv("PSP_LANGUAGES", str(SHARED_REGISTRY))
    with DagsterInstance.ephemeral() as instance:
        context = build_schedule_context(
            instance=instance, scheduled_execution_time=datetime(2026, 11, 23, 3, tzinfo=UTC)
        )
        requests = list(weekly_retrain_schedule(context))
    assert requests and all(
        r.run_config == {"resources": {"profile": {"config": {"name": "paper"}}}} for r in requests
    )
    monkeypatch.setenv("PSP_RETRAIN_PROFILE", "demo")
    assert retrain_run_config()["resources"]["profile"]["config"]["name"] == "demo"


def test_the_launchpad_offers_the_three_profiles_with_their_costs() -> None:
    job = defs.resolve_job_def("psp_language_job")
    fields = job.run_config_schema.config_type.fields["resources"].config_type.fields
    name = fields["profile"].config_type.fields["config"].config_type.fields["name"]
    enum = getattr(name.config_type, "inner_type", name.config_type)  # Noneable: has a default
    assert sorted(value.config_value for value in enum.enum_values) == [
        "demo",
        "paper",
        "smoke",
    ]
    assert "paper" in name.description and "minute" in name.description
    for profile in Profile:
        assert re.search(rf"\b{profile.value}: [^;]*(minute|hour)", job.description)
    # one file per profile, the same for every job
    for profile in ("smoke", "demo"):
        config = yaml.safe_load((ROOT / "configs" / f"{profile}.yaml").read_text())
        assert config == {"resources": {"profile": {"config": {"name": profile}}}}


# --------------------------------------------------------------------------------------------
# every profile, every language (real data)


def _head_gz(source: Path, target: Path, lines: int) -> None:
    with gzip.open(source, "rt", encoding="utf-8") as reader:
        head = list(islice(reader, lines))
    with gzip.open(target, "wt", encoding="utf-8") as writer:
        writer.writelines(head)


@pytest.fixture(scope="module")
def small_world(tmp_path_factory) -> dict:
    """The shared-data registry's languages on the first SMALL pairs of each bitext (and of
    the ParaNMT sample for en), the real evaluation data."""
    bitext = require_shared_data("bitext")
    eval_dir = require_shared_data("eval")
    paranmt = require_shared_data("paraphrase", "paranmt-format-sample.txt.gz")
    work = tmp_path_factory.mktemp("profiles")
    registry = SHARED_REGISTRY.read_text()
    for directory in sorted(bitext.glob("en-*")):
        small = work / "bitext" / directory.name
        small.mkdir(parents=True)
        for path in directory.glob("combined.*.gz"):
            _head_gz(path, small / path.name, SMALL)
        registry = registry.replace(f'"../shared/data/bitext/{directory.name}"', f'"{small}"')
    assert 'local_dir = "../shared' not in registry
    (work / "languages.toml").write_text(registry)
    _head_gz(paranmt, work / "paranmt.txt.gz", SMALL)
    return {"work": work, "eval_dir": eval_dir, "paranmt": work / "paranmt.txt.gz"}


def _resources(world: dict, root: Path) -> dict:
    return {
        "storage": StorageResource(root=str(root)),
        "opus": OpusResource(api_base="http://127.0.0.1:9/unused", retries=1),
        "paranmt": ParaNmtResource(url=str(world["paranmt"]), retries=1),
        "langid": LanguageIdResource(),
        "compute": ComputeResource(device="cpu", threads=1, workers=1),
        "eval_data": EvaluationDataResource(eval_dir=str(world["eval_dir"])),
        "profile": ProfileResource(),
    }


def _newest_bundle(stage: Path) -> Path:
    """The bundle this profile's run trained: its newest version, whether or not the promotion
    gate let it replace the model of the run before (a 3-step model rarely passes it)."""
    return ModelRegistry(stage).versions()[-1].bundle


@pytest.mark.slow
@pytest.mark.real_data
@pytest.mark.parametrize("lang", ["en", "ar", "de", "es", "fr", "ru", "tr", "zh"])
def test_every_profile_runs_for_every_language(small_world: dict, lang: str, monkeypatch) -> None:
    monkeypatch.setenv("PSP_LANGUAGES", str(small_world["work"] / "languages.toml"))
    assert lang in load_registry().codes
    root = small_world["work"] / "storage" / lang
    for profile in Profile:
        config: dict = {"resources": {"profile": {"config": {"name": profile.value}}}}
        stages = LANGUAGE_STAGES
        if profile != Profile.smoke:
            # the profile's vocabulary and model, trained for a few mini-batches; the smoke run
            # covered the evaluation (nothing in it depends on the profile but the speed repeats)
            config["ops"] = {"psp_model": {"config": {"max_steps": 3}}}
            stages = LANGUAGE_STAGES[: LANGUAGE_STAGES.index("psp_model") + 1]
        assets = [defs.get_assets_def(name) for name in stages]
        result = materialize(
            assets, partition_key=lang, resources=_resources(small_world, root), run_config=config
        )
        assert result.success, (lang, profile)
        expected = PROFILE_SETTINGS[profile]
        model = load_model(_newest_bundle(root / lang / "psp_model"))
        assert model.config.dim == expected.get("psp_model", {}).get("dim", 1024)
        spm = json.loads((root / lang / "sentencepiece_model" / "manifest.json").read_text())
        requested = spm["record"]["settings"]["vocab_size"]
        assert requested == expected.get("sentencepiece_model", {}).get("vocab_size", 50_000)
        if profile == Profile.smoke:
            evaluation = root / lang / "model_evaluation" / "results.json"
            assert json.loads(evaluation.read_text())["sts"]["mean"] is not None


@pytest.mark.slow
@pytest.mark.real_data
def test_every_profile_runs_the_multilingual_model(small_world: dict, monkeypatch) -> None:
    """All eight languages' real pairs (small copies) into one multilingual model per profile:
    every script through one vocabulary, Chinese as raw text (the default pre-tokenizer)."""
    monkeypatch.setenv("PSP_LANGUAGES", str(small_world["work"] / "languages.toml"))
    root = small_world["work"] / "storage-multi"
    resources = _resources(small_world, root)
    codes = load_registry().multi_languages()
    assert codes == ["en", "ar", "de", "es", "fr", "ru", "tr", "zh"]
    prepare = [defs.get_assets_def(name) for name in LANGUAGE_STAGES[:4]]
    for code in codes:
        assert materialize(prepare, partition_key=code, resources=resources).success, code
    names = ["multi_pairs", "multi_sentencepiece_model", "multi_training_data", "multi_psp_model"]
    for profile in Profile:
        config: dict = {"resources": {"profile": {"config": {"name": profile.value}}}}
        stages = [*names, "multi_evaluation"]
        if profile != Profile.smoke:
            # the profile's model for a few mini-batches, its vocabulary (the size it asks for,
            # which the data caps) from a sample of the sentences
            config["ops"] = {
                "multi_sentencepiece_model": {"config": {"input_sentence_size": SPM_SAMPLE}},
                "multi_psp_model": {"config": {"max_steps": 3}},
            }
            stages = names
        assets = [defs.get_assets_def(name) for name in stages]
        result = materialize(assets, resources=resources, run_config=config)
        assert result.success, profile
        expected = PROFILE_SETTINGS[profile]
        model = load_model(_newest_bundle(root / "multi" / "psp_model"))
        assert model.config.languages == sorted(codes)
        assert model.config.pretokenizer == "none"
        assert model.config.dim == expected.get("multi_psp_model", {}).get("dim", 1024)
        trained = model.config.training["config"]  # every setting of the profile reached it
        for name, value in expected.get("multi_psp_model", {}).items():
            assert trained[name] == value, (profile, name)
        spm = json.loads((root / "multi" / "sentencepiece_model" / "manifest.json").read_text())
        requested = spm["record"]["settings"]["vocab_size"]
        assert requested == expected.get("multi_sentencepiece_model", {}).get("vocab_size", 50_000)
        if profile == Profile.smoke:
            evaluation = json.loads(
                (root / "multi" / "model_evaluation" / "results.json").read_text()
            )
            assert {"ar-en", "es-en", "tr-en", "en-en"} <= set(evaluation["sts17"])
            assert evaluation["stsb"] and evaluation["sts"]["mean"] is not None
