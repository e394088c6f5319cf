"""The multilingual model's assets on generated data: German (OPUS), English paraphrases
(ParaNMT) and Chinese (OPUS) prepared by their own partitions, then psp_multi_job's assets with
the smoke profile: the union is temperature-sampled from the partitions' own outputs (Chinese
from its unsegmented pairs, through the Han-only pre-tokenizer), packed with each pair's
language, trained, evaluated on every set, and shown on the scoreboard beside the languages."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import yaml
from dagster import materialize

from assets.settings.languages import load_registry
from ops.pairs.pair_files import iter_pair_batches
from pipelines.definitions import defs
from psp_core import load_model
from psp_core.tokenization.tokenizer import make_pretokenizer
from psp_core.training.training_file import TrainingFile
from tests.ops.opus_server import OpusServer, build_moses_zip
from tests.pipelines.conftest import loopback_resources
from tests.pipelines.corpora import (
    DE_EN_REGISTRY,
    english_chinese,
    paranmt_zip,
    publish_de,
    write_eval_dir,
)

ROOT = Path(__file__).resolve().parents[2]
SMOKE = yaml.safe_load((ROOT / "configs" / "smoke.yaml").read_text())
PREPARE = ["raw_pairs", "langid_filtered_pairs", "length_filtered_pairs", "deduplicated_pairs"]
MULTI = [
    "multi_pairs",
    "multi_retrain_plan",
    "multi_sentencepiece_model",
    "multi_training_data",
    "multi_psp_model",
    "multi_evaluation",
]
REGISTRY = (
    DE_EN_REGISTRY
    + """[languages.zh]
source = "opus"
pretokenizer = "rjieba"
corpora = [{ name = "Tanzil", version = "v1" }]

# jieba on Han runs, a registry setting (the default is raw text): its path through the pipeline
[multi]
pretokenizer = "rjieba_han"
"""
)


def assets(*names: str) -> list:
    return [defs.get_assets_def(name) for name in names]


@pytest.fixture()
def world(opus_server: OpusServer, tmp_path: Path, monkeypatch) -> dict:
    publish_de(opus_server, build_moses_zip)
    english, chinese = english_chinese(300, seed=4)
    chinese = [
        f"{line[:-1]} iPhone {i}。" if i % 10 == 0 else line for i, line in enumerate(chinese)
    ]
    opus_server.add_corpus(
        "Tanzil", "v1", "en", "zh", build_moses_zip("Tanzil", "en", "zh", english, chinese)
    )
    opus_server.add_file("/para-nmt-50m.zip", paranmt_zip(700))
    write_eval_dir(tmp_path / "eval")
    registry = tmp_path / "languages.toml"
    registry.write_text(REGISTRY)
    monkeypatch.setenv("PSP_LANGUAGES", str(registry))
    resources = loopback_resources(opus_server, tmp_path / "storage", tmp_path / "eval")
    return {"resources": resources, "root": tmp_path / "storage"}


def test_missing_languages_are_named_with_how_to_build_them(world: dict) -> None:
    result = materialize(assets("multi_pairs"), resources=world["resources"], raise_on_error=False)
    assert not result.success
    error = result.get_step_failure_events()[0].step_failure_data.error.to_string()
    assert "deduplicated pairs of de, en, zh" in error
    assert "make run PARTITION=multi" in error


def test_the_multilingual_model_from_the_languages_own_outputs(world: dict) -> None:
    resources, root = world["resources"], world["root"]
    for code in ("de", "en", "zh"):
        prepared = materialize(assets(*PREPARE), partition_key=code, resources=resources)
        assert prepared.success, code
    result = materialize(assets(*MULTI), resources=resources, run_config=SMOKE)
    assert result.success

    # the union: every language, counts kept in the run's metadata, the total unchanged
    [event] = result.asset_materializations_for_node("multi_pairs")
    metadata = event.metadata
    table = metadata["languages"].value
    for code, kind in (("de", "bitext"), ("en", "paraphrase"), ("zh", "bitext")):
        assert f"| {code} | " in table and f"| {kind} |" in table
    record = json.loads((root / "multi" / "deduplicated_pairs" / "manifest.json").read_text())
    counts = {code: row["pairs_in"] for code, row in record["record"]["languages"].items()}
    for code in counts:  # read from the partitions' own deduplicated pairs
        dedup = json.loads((root / code / "deduplicated_pairs" / "manifest.json").read_text())
        assert counts[code] == dedup["record"]["n_out"]
    assert metadata["pairs_out"].value == sum(counts.values())
    assert metadata["sampling_alpha"].value == load_registry().multi.sampling_alpha

    # Chinese from its unsegmented pairs, Han runs segmented, the Latin word untouched
    segment = make_pretokenizer("rjieba_han")
    unsegmented = root / "zh" / "deduplicated_pairs" / "unsegmented.parquet"
    expected = {
        (segment(src), segment(tgt))
        for batch in iter_pair_batches(unsegmented)
        for src, tgt in zip(batch["src"].to_pylist(), batch["tgt"].to_pylist(), strict=True)
    }
    zh_rows = [
        (src, tgt)
        for batch in iter_pair_batches(root / "multi" / "deduplicated_pairs" / "pairs.parquet")
        for src, tgt, lang in zip(
            *(batch[c].to_pylist() for c in ("src", "tgt", "lang")), strict=True
        )
        if lang == "zh"
    ]
    assert zh_rows and set(zh_rows) <= expected
    assert any(" iphone " in tgt for _, tgt in zh_rows)  # whole-sentence jieba would split it

    # packed with each pair's language and the mining rule of its kind
    with TrainingFile(root / "multi" / "training_data" / "train.h5") as data:
        assert data.info.groups == ("de", "en", "zh")
        assert data.info.group_kinds == ("bitext", "paraphrase", "bitext")
        assert sorted(set(data.read_groups(0, len(data)).tolist())) == [0, 1, 2]

    model = load_model(root / "multi" / "psp_model" / "model")
    assert model.config.languages == ["de", "en", "zh"]
    assert model.config.pretokenizer == "rjieba_han"
    assert model.config.training["negatives_from"] == "by kind, within the megabatch"
    data = model.config.training["data"]  # the bundle records the languages and the sampling
    assert data["description"]["pairs_in"] == counts
    assert data["description"]["sampling_alpha"] == load_registry().multi.sampling_alpha
    assert sum(data["group_pairs"]) == sum(counts.values())

    # every set of its languages
    evaluation = json.loads((root / "multi" / "model_evaluation" / "results.json").read_text())
    assert "en-en" in evaluation["sts17"] and "deu" in evaluation["tatoeba"]
    assert evaluation["stsb"]

    # the scoreboard shows it beside a language's model, set by set
    single = materialize(
        assets("sentencepiece_model", "training_data", "psp_model", "model_evaluation"),
        partition_key="de",
        resources=resources,
        run_config=SMOKE,
    )
    assert single.success
    board = materialize(assets("evaluation_scoreboard"), resources=resources)
    [event] = board.asset_materializations_for_node("evaluation_scoreboard")
    comparison = {r.data["set"]: r.data for r in event.metadata["multi_vs_languages"].records}
    # the multilingual model keeps its last epoch (no selection on STS 2017 en-en): en-en is
    # one more test set for it
    assert comparison["STS 2017 en-en (Pearson)"]["best_model"] is None  # de has no en-en
    assert not evaluation["sts17"]["en-en"].get("dev")
    tatoeba = comparison["Tatoeba deu error % (cosine)"]
    assert tatoeba["best_model"] == "de"
    assert tatoeba["better_by"] == round(tatoeba["best_score"] - tatoeba["score"], 1)
    scoreboard = (root / "_all" / "evaluation_scoreboard" / "scoreboard.md").read_text()
    assert "| multi |" in scoreboard and "Not evaluated yet: en, zh" in scoreboard

    # a second run reuses every stage
    again = materialize(assets(*MULTI), resources=resources, run_config=SMOKE)
    reused = [
        e.materialization.metadata["reused"].value for e in again.get_asset_materialization_events()
    ]
    assert reused == [True] * len(MULTI)


def test_the_raw_text_multilingual_model_exports_from_its_config(world: dict, tmp_path) -> None:
    """The shipped default (Chinese as raw text, no [multi] pretokenizer): ``exports`` in
    multi_psp_model's config writes both formats, which embed Chinese, German and English as
    psp_core does."""
    pytest.importorskip("sentence_transformers", reason="the export extra is not installed")
    pytest.importorskip("model2vec", reason="the export extra is not installed")
    from model2vec import StaticModel
    from sentence_transformers import SentenceTransformer

    registry = tmp_path / "languages.toml"
    registry.write_text(REGISTRY.replace('pretokenizer = "rjieba"\n', "").split("\n# jieba")[0])
    assert load_registry().multi.pretokenizer == "none"
    resources, root = world["resources"], world["root"]
    for code in ("de", "en", "zh"):
        assert materialize(assets(*PREPARE), partition_key=code, resources=resources).success
    formats = ["sentence-transformers", "model2vec"]
    config = {**SMOKE, "ops": {"multi_psp_model": {"config": {"exports": formats}}}}
    names = [name for name in MULTI if name != "multi_evaluation"]
    assert materialize(assets(*names), resources=resources, run_config=config).success
    model = load_model(root / "multi" / "psp_model" / "model")
    assert model.config.pretokenizer == "none"
    english, chinese = english_chinese(30, seed=9)
    sentences = english + chinese + ["Ein Mann spielt Gitarre.", "中文 and English 混合"]
    expected = model.embed(sentences)
    exports = root / "multi" / "psp_model" / "exports"
    st = SentenceTransformer(str(exports / formats[0]), device="cpu", local_files_only=True)
    m2v = StaticModel.from_pretrained(exports / formats[1])
    for vectors in (st.encode(sentences, convert_to_numpy=True), m2v.encode(sentences)):
        norms = np.linalg.norm(expected, axis=1) * np.linalg.norm(vectors, axis=1)
        cosines = np.einsum("ij,ij->i", expected, vectors) / np.maximum(norms, 1e-30)
        assert (cosines >= 0.9999).all(), cosines.min()
