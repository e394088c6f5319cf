"""dagster.materialize() of the real assets, per language partition, against a loopback OPUS
server, a served ParaNMT zip and a generated evaluation directory, with the smoke profile."""

from __future__ import annotations

import importlib.util
import json
import time
from pathlib import Path

import h5py
import numpy as np
import pytest
import yaml
from dagster import AssetKey, DagsterInstance, TableMetadataValue, materialize

from assets.settings.resources import ComputeResource
from ops.pairs.pair_files import iter_pairs, pair_file_info
from pipelines.definitions import ASSET_MODULES, defs
from psp_core import load_model
from tests.ops.opus_server import OpusServer, build_moses_zip
from tests.pipelines.conftest import LANGUAGE_STAGES, loopback_resources
from tests.pipelines.corpora import (
    NOT_GERMAN,
    de_corpus_lines,
    english_chinese,
    english_german,
    paranmt_lines,
    paranmt_zip,
    publish_de,
    write_eval_dir,
)

ROOT = Path(__file__).resolve().parents[2]
SMOKE = yaml.safe_load((ROOT / "configs" / "smoke.yaml").read_text())
ALL_ASSETS = [  # the language-partitioned assets (the scoreboard and multi_* are not)
    defs.get_assets_def(key)
    for key in defs.get_repository_def().asset_graph.get_all_asset_keys()
    if defs.get_repository_def().asset_graph.get(key).partitions_def is not None
]
STAGES = LANGUAGE_STAGES


def assets_named(*names: str) -> list:
    return [defs.get_assets_def(name) for name in names]


def metadata_of(result, name: str) -> dict:
    events = result.asset_materializations_for_node(name)
    assert len(events) == 1, name
    return {key: table_rows(value) for key, value in events[0].metadata.items()}


def table_rows(value):
    """A table's rows as dicts (what the UI shows as a table); other values as they are."""
    if isinstance(value, TableMetadataValue):
        return [record.data for record in value.records]
    return value.value


def column(rows: list[dict], name: str) -> list:
    return [row[name] for row in rows]


def check_outcomes(result) -> dict[str, bool]:
    return {e.check_name: e.passed for e in result.get_asset_check_evaluations()}


@pytest.fixture()
def world(opus_server: OpusServer, tmp_path: Path) -> dict:
    n_raw = publish_de(opus_server, build_moses_zip)
    opus_server.add_file("/para-nmt-50m.zip", paranmt_zip(700))
    write_eval_dir(tmp_path / "eval")
    resources = loopback_resources(opus_server, tmp_path / "storage", tmp_path / "eval")
    return {"resources": resources, "root": tmp_path / "storage", "n_raw": n_raw}


@pytest.mark.slow
def test_bitext_language_end_to_end_then_reuse_then_inbox(world: dict, opus_server) -> None:
    root, resources = world["root"], world["resources"]
    result = materialize(ALL_ASSETS, partition_key="de", resources=resources, run_config=SMOKE)
    assert result.success
    assert all(check_outcomes(result).values()) and len(check_outcomes(result)) == 8

    raw = metadata_of(result, "raw_pairs")
    assert raw["pairs_in"] == world["n_raw"] == raw["pairs_out"]
    sources = {row["source"]: row for row in raw["per_source"]}
    assert {"OpenSubtitles", "Tanzil"} <= set(sources)
    assert sum(row["pairs_kept"] for row in sources.values()) == raw["pairs_out"]
    assert pair_file_info(root / "de" / "raw_pairs" / "pairs.parquet") == (
        world["n_raw"],
        "en",
        "de",
        False,
    )
    langid = metadata_of(result, "langid_filtered_pairs")
    assert "dropped: tgt_not_de" in column(langid["funnel"], "pairs")
    assert langid["pairs_in"] - langid["pairs_out"] >= NOT_GERMAN
    assert 50 < langid["pass_rate_percent"] < 100
    length = metadata_of(result, "length_filtered_pairs")
    assert length["pairs_out"] <= length["pairs_in"]
    dedup = metadata_of(result, "deduplicated_pairs")
    assert "dropped: duplicate" in column(dedup["funnel"], "pairs")
    assert "langid_filtered_pairs" in column(dedup["pipeline_funnel"], "stage")
    deduplicated = list(iter_pairs(root / "de" / "deduplicated_pairs" / "pairs.parquet"))
    assert len(deduplicated) == len(set(deduplicated)) == dedup["pairs_out"]
    assert all(src == src.lower() for src, _ in deduplicated)
    # the dev suite's pairs: held back before sentencepiece, no sentence shared with training
    held = list(iter_pairs(root / "de" / "deduplicated_pairs" / "dev_pairs.parquet"))
    assert "dropped: held_back" in column(dedup["funnel"], "pairs") and len(held) > 10
    held_sentences = {s for pair in held for s in pair}
    assert not any(a in held_sentences or b in held_sentences for a, b in deduplicated)

    spm = metadata_of(result, "sentencepiece_model")
    assert spm["requested_vocab_size"] == 500 and 50 < spm["vocab_size"] <= 500
    packed = metadata_of(result, "training_data")
    with h5py.File(root / "de" / "training_data" / "train.h5") as handle:
        assert int(handle.attrs["n_pairs"]) == packed["n_pairs"] == dedup["pairs_out"]
        assert int(handle.attrs["vocab_size"]) == spm["vocab_size"]

    trained = metadata_of(result, "psp_model")
    assert (trained["dim"], trained["vocab_size"]) == (32, spm["vocab_size"])
    assert column(trained["epochs"], "epoch") == [1] and trained["pairs_per_second"] > 0
    assert "data:image/svg+xml;base64," in trained["loss_curve"]  # the loss picture
    assert trained["last_epoch_mean_loss"] == round(trained["last_epoch_mean_loss"], 4)
    assert trained["training_ended"] >= trained["training_started"] > 1.7e9  # timestamps
    assert "model_path" not in trained and "lr" in column(trained["settings"], "name")
    origins = {row["name"]: row["from"] for row in trained["settings"]}
    assert origins["dim"] == "profile smoke" and origins["margin"].endswith("[defaults.training]")
    assert trained["last_epoch_mean_loss"] > 0
    model = load_model(root / "de" / "psp_model" / "model")
    assert model.embed(["the old man reads a long letter."]).shape == (1, 32)

    evaluation = metadata_of(result, "model_evaluation")
    results = json.loads((root / "de" / "model_evaluation" / "results.json").read_text())
    # the paper's evaluation of a bitext model: English STS, Tatoeba X (no STS 2017 track has de)
    assert results["sts"]["mean"] is not None and list(results["tatoeba"]) == ["deu"]
    assert results["sts17"] == {} and results["stsb"] == {}
    assert "Tatoeba" in evaluation["results"]
    assert "Pearson r x 100" in evaluation["scales"] and "error %" in evaluation["scales"]
    # each suite is an inline table too, with the paper's figure beside ours
    (tatoeba,) = evaluation["tatoeba"]
    assert tatoeba["language"] == "deu" and tatoeba["paper"] == 1.5
    assert tatoeba["error_mean"] == round(results["tatoeba"]["deu"]["cosine_mean"], 1)
    mean = evaluation["sts"][-1]
    assert mean["set"].startswith("mean") and mean["pearson"] == round(
        results["sts"]["mean"]["pearson"], 1
    )
    assert "sts17" not in evaluation and "stsb" not in evaluation

    # the scoreboard shows de's numbers and names the languages not evaluated yet
    board = materialize(assets_named("evaluation_scoreboard"), resources=resources)
    assert board.success
    table = metadata_of(board, "evaluation_scoreboard")
    assert table["languages"] == "de" and "en" in table["not_evaluated"].split(", ")
    (de_row,) = [row for row in table["scoreboard"] if row["lang"] == "de"]
    # our mean says which years it covers (the paper's is 2012-2016), one short cell each
    assert de_row["sts_mean"] == round(results["sts"]["mean"]["pearson"], 1)
    assert de_row["sts_years"] == "2012"
    assert de_row["tatoeba_error"] == round(results["tatoeba"]["deu"]["cosine_mean"], 1)
    (deu,) = table["tatoeba"]
    assert deu["lang"] == "de" and deu["language"] == "deu" and deu["paper"] == 1.5
    saved = root / "_all" / "evaluation_scoreboard" / "scoreboard.md"
    assert "| 74.6 |" in saved.read_text() and saved.with_suffix(".json").is_file()

    # unchanged inputs and config: every stage reuses its output, and rewrites no file (the
    # version's test scores and the model card included: same content, same inode and time)
    def files() -> dict[str, tuple[int, int]]:
        found = (p for p in (root / "de").rglob("*") if p.is_file())
        return {str(p): (p.stat().st_ino, p.stat().st_mtime_ns) for p in found}

    before = files()
    started = time.perf_counter()
    instance = DagsterInstance.ephemeral()
    again = materialize(
        ALL_ASSETS, partition_key="de", resources=resources, run_config=SMOKE, instance=instance
    )
    assert again.success
    # each step's log says it computed nothing (a run of reused steps said nothing before)
    said = [e.user_message for e in instance.all_logs(again.run_id) if e.user_message]
    for name in STAGES:
        assert any(m.startswith(f"{name} [de]: nothing to compute") for m in said), name
    assert all(metadata_of(again, name)["reused"] for name in STAGES)
    # the note that the figures are an earlier run's comes above them, on every stage
    assert {name: list(metadata_of(again, name))[0] for name in STAGES} == dict.fromkeys(
        STAGES, "reused_note"
    )
    assert "nothing recomputed" in metadata_of(again, "psp_model")["reused_note"]
    assert "reused_note" not in metadata_of(result, "psp_model")
    assert time.perf_counter() - started < 30
    after = files()
    assert sorted(after) == sorted(before)
    assert [path for path in before if after[path] != before[path]] == []
    versions = {
        name: again.asset_materializations_for_node(name)[0].tags["dagster/data_version"]
        for name in STAGES
    }
    assert versions["raw_pairs"] == metadata_of(result, "raw_pairs")["fingerprint"]

    # the model card: the data per source and filter, the run, the evaluation's tables
    card = (root / "de" / "psp_model" / "model" / "README.md").read_text()
    assert "## Training data" in card and "| OpenSubtitles |" in card
    assert "| langid_filtered_pairs |" in card and "| training time |" in card
    assert "## Evaluation" in card and "| deu |" in card
    if importlib.util.find_spec("model2vec"):  # the `export` extra
        # exports on request, of the model already trained, each with the card, loading in
        # their libraries with psp_core's vectors (cosine)
        formats = ["model2vec", "sentence-transformers"]
        config = SMOKE | {"ops": {"psp_model": {"config": {"exports": formats}}}}
        exported = materialize(
            ALL_ASSETS, partition_key="de", resources=resources, run_config=config
        )
        assert exported.success and metadata_of(exported, "psp_model")["reused"]
        sentences = [s for pair in zip(*english_german(40, seed=5), strict=True) for s in pair]
        want = load_model(root / "de" / "psp_model" / "model").embed(sentences, normalize=True)
        for name in formats:
            folder = root / "de" / "psp_model" / "exports" / name
            exported_to = Path(metadata_of(exported, "psp_model")[f"export_{name}"])
            assert exported_to.resolve() == folder.resolve()  # the promoted version's
            exported_card = (folder / "README.md").read_text()
            assert f"library_name: {name}" in exported_card and "| deu |" in exported_card
            got = _load_export(name, folder).encode(sentences)
            got = got / np.maximum(np.linalg.norm(got, axis=1, keepdims=True), 1e-12)
            assert np.einsum("ij,ij->i", got, want).min() > 0.9999

    # new bitext in the inbox: raw pairs grow and every downstream stage recomputes
    inbox = root / "inbox" / "de"
    inbox.mkdir(parents=True)
    english, german = english_german(50, seed=77)
    (inbox / "extra.en").write_text("\n".join(english) + "\n")
    (inbox / "extra.de").write_text("\n".join(german) + "\n")
    third = materialize(ALL_ASSETS, partition_key="de", resources=resources, run_config=SMOKE)
    assert third.success
    assert metadata_of(third, "raw_pairs")["pairs_out"] == world["n_raw"] + 50
    assert not any(metadata_of(third, name)["reused"] for name in STAGES[:-1])
    # the evaluation is of the language's model: anew only if the gate promoted the new version
    promotion = metadata_of(third, "psp_model")["promotion"]
    assert promotion in ("promoted", "not promoted")
    assert metadata_of(third, "model_evaluation")["reused"] == (promotion == "not promoted")


def _load_export(name: str, folder: Path):
    if name == "model2vec":
        from model2vec import StaticModel

        return StaticModel.from_pretrained(folder)
    from sentence_transformers import SentenceTransformer

    return SentenceTransformer(str(folder), device="cpu", local_files_only=True)


def test_paraphrase_language_from_paranmt(world: dict) -> None:
    root = world["root"]
    inbox = root / "inbox" / "en"
    inbox.mkdir(parents=True)
    (inbox / "more-paraphrases.txt").write_text("\n".join(paranmt_lines(50, seed=8)) + "\n")
    names = STAGES[: STAGES.index("training_data") + 1]
    result = materialize(
        assets_named(*names), partition_key="en", resources=world["resources"], run_config=SMOKE
    )
    assert result.success
    raw = metadata_of(result, "raw_pairs")
    assert raw["pairs_out"] == 750
    # the configured URL and the inbox file
    assert [row["source"] for row in raw["per_source"]].count("paranmt") == 2
    assert pair_file_info(root / "en" / "raw_pairs" / "pairs.parquet") == (750, "en", "en", True)
    filtered = metadata_of(result, "length_filtered_pairs")
    assert "dropped: score_too_low" in column(filtered["funnel"], "pairs")
    with h5py.File(root / "en" / "training_data" / "train.h5") as handle:
        assert handle.attrs["kind"] == "paraphrase"
        assert int(handle.attrs["n_pairs"]) > 0


def test_blocking_langid_check_stops_the_language(opus_server: OpusServer, tmp_path: Path) -> None:
    english, _ = english_german(200, seed=3)
    for corpus, version in (
        ("OpenSubtitles", "v2018"),
        ("Tanzil", "v1"),
        ("GlobalVoices", "v2017q3"),
    ):
        data = build_moses_zip(corpus, "en", "de", english, english)  # "German" is English
        opus_server.add_corpus(corpus, version, "en", "de", data)
    resources = loopback_resources(opus_server, tmp_path / "storage", tmp_path / "eval")
    result = materialize(
        assets_named(*STAGES[:4]), partition_key="de", resources=resources, raise_on_error=False
    )
    assert check_outcomes(result)["langid_pass_rate_in_range"] is False
    materialized = {e.asset_key for e in result.get_asset_materialization_events()}
    assert AssetKey("langid_filtered_pairs") in materialized
    assert AssetKey("length_filtered_pairs") not in materialized
    assert not (tmp_path / "storage" / "de" / "length_filtered_pairs" / "pairs.parquet").exists()


def test_opus_version_override_from_run_config(opus_server: OpusServer, tmp_path: Path) -> None:
    publish_de(opus_server, build_moses_zip)
    english, german = english_german(30, seed=9)
    opus_server.add_corpus(
        "Tanzil", "v2", "en", "de", build_moses_zip("Tanzil", "en", "de", english, german)
    )
    resources = loopback_resources(opus_server, tmp_path / "storage", tmp_path / "eval")
    config = {"ops": {"raw_pairs": {"config": {"opus_versions": {"Tanzil": "v2"}}}}}
    result = materialize(
        assets_named("raw_pairs"), partition_key="de", resources=resources, run_config=config
    )
    assert result.success
    sources = metadata_of(result, "raw_pairs")["sources"]
    assert {c["name"]: c["version"] for c in sources if c["kind"] == "opus"}["Tanzil"] == "v2"
    assert (tmp_path / "storage" / "cache" / "opus" / "Tanzil" / "v2" / "de-en.txt.zip").is_file()


def test_a_corpus_cap_samples_the_pairs_that_passed_the_filters(
    opus_server: OpusServer, tmp_path: Path, monkeypatch
) -> None:
    """OpenSubtitles capped at 100: 100 of its ~220 passing pairs, drawn from the whole
    corpus (not its first lines), the other corpora whole; the metadata says so per corpus."""
    publish_de(opus_server, build_moses_zip)
    registry = tmp_path / "languages.toml"
    registry.write_text(
        '[languages.de]\nsource = "opus"\ncorpora = [\n'
        '  { name = "OpenSubtitles", version = "v2018", cap = 100 },\n'
        '  { name = "Tanzil", version = "v1" },\n  { name = "GlobalVoices", version = "v2017q3" },\n]\n'
    )
    monkeypatch.setenv("PSP_LANGUAGES", str(registry))
    resources = loopback_resources(opus_server, tmp_path / "storage", tmp_path / "eval")
    stages = assets_named(
        "raw_pairs", "langid_filtered_pairs", "length_filtered_pairs", "deduplicated_pairs"
    )
    result = materialize(stages, partition_key="de", resources=resources)
    assert result.success
    table = metadata_of(result, "deduplicated_pairs")["corpora"]
    rows = {row["corpus"]: row for row in table}
    english, german = de_corpus_lines("OpenSubtitles", 0)
    assert rows["OpenSubtitles"]["lines_read"] == len(english)
    assert rows["OpenSubtitles"]["passing"] > 150 and rows["OpenSubtitles"]["kept"] == 100
    for corpus in ("Tanzil", "GlobalVoices"):
        assert rows[corpus]["kept"] == rows[corpus]["passing"] > 50
    folder = tmp_path / "storage" / "de" / "deduplicated_pairs"
    # the capped sample, less the few pairs dropped for sharing a sentence with the held-back
    kept = set(iter_pairs(folder / "pairs.parquet")) | set(iter_pairs(folder / "dev_pairs.parquet"))
    first_seen: dict[tuple[str, str], int] = {}
    for i, pair in enumerate(zip(english, german, strict=True)):
        first_seen.setdefault((pair[0].lower(), pair[1].lower()), i)
    positions = sorted(i for pair, i in first_seen.items() if pair in kept)
    assert 90 <= len(positions) <= 100 and max(positions) > 200 and min(positions) < 20
    dedup = metadata_of(result, "deduplicated_pairs")
    assert "dropped: capped" in column(dedup["funnel"], "pairs")


def test_local_source_from_a_registry_entry(tmp_path: Path, monkeypatch) -> None:
    bitext = tmp_path / "bitext"
    bitext.mkdir()
    english, german = english_german(40, seed=4)
    (bitext / "news.en").write_text("\n".join(english) + "\n")
    (bitext / "news.de").write_text("\n".join(german) + "\n")
    registry = tmp_path / "languages.toml"
    registry.write_text(f'[languages.de]\nsource = "local"\nlocal_dir = "{bitext}"\n')
    monkeypatch.setenv("PSP_LANGUAGES", str(registry))
    resources = loopback_resources(OpusServer(), tmp_path / "storage", tmp_path / "eval")
    result = materialize(assets_named("raw_pairs"), partition_key="de", resources=resources)
    assert result.success
    assert metadata_of(result, "raw_pairs")["pairs_out"] == 40


def test_missing_upstream_is_a_clear_error(tmp_path: Path) -> None:
    resources = loopback_resources(OpusServer(), tmp_path / "storage", tmp_path / "eval")
    with pytest.raises(Exception, match="materialize raw_pairs \\(partition fr\\) first"):
        materialize(assets_named("langid_filtered_pairs"), partition_key="fr", resources=resources)


def test_every_stage_module_defines_one_asset() -> None:
    assert len(ASSET_MODULES) == len(STAGES) + 2  # and the multilingual model, the scoreboard


@pytest.mark.parametrize("pretokenizer", ["none", "rjieba"])
def test_chinese_is_segmented_and_the_bundle_records_its_segmenter(
    opus_server: OpusServer, tmp_path: Path, monkeypatch, pretokenizer: str
) -> None:
    """The shipped default trains sentencepiece on raw Chinese text; ``rjieba`` (the paper's
    jieba segmentation, still a registry setting) segments first, in worker processes."""
    if pretokenizer != "none":  # the shipped registry with zh's pre-tokenizer changed
        text = (ROOT / "assets" / "languages.toml").read_text()
        at = text.index('pretokenizer = "none"', text.index("[languages.zh]"))
        text = text[:at] + f'pretokenizer = "{pretokenizer}"' + text[at + 21 :]
        registry = tmp_path / "languages.toml"
        registry.write_text(text)
        monkeypatch.setenv("PSP_LANGUAGES", str(registry))
    corpora = [("OpenSubtitles", "v2018", "zh_cn"), ("Tanzil", "v1", "zh")]
    corpora += [("GlobalVoices", "v2017q3", "zhs"), ("MultiUN", "v1", "zh")]
    for seed, (corpus, version, code) in enumerate(corpora):
        english, chinese = english_chinese(80, seed=seed)
        data = build_moses_zip(corpus, "en", code, english, chinese)
        opus_server.add_corpus(corpus, version, "en", code, data)
    resources = loopback_resources(opus_server, tmp_path / "storage", tmp_path / "eval")
    # two worker processes (language ID, jieba, encoding): the parallel paths, and this
    # process's jieba stays untouched
    resources["compute"] = ComputeResource(device="cpu", threads=1, workers=2)
    result = materialize(
        assets_named(*STAGES[: STAGES.index("psp_model") + 1]),
        partition_key="zh",
        resources=resources,
        run_config=SMOKE,
    )
    assert result.success
    assert metadata_of(result, "raw_pairs")["pairs_out"] == 320
    assert metadata_of(result, "deduplicated_pairs")["pretokenizer"] == pretokenizer
    pairs = list(iter_pairs(tmp_path / "storage" / "zh" / "deduplicated_pairs" / "pairs.parquet"))
    spaced = [" " in chinese for _, chinese in pairs]
    if pretokenizer == "none":  # the generated Chinese has no spaces of its own
        assert pairs and not any(spaced)
    else:
        assert pairs and all(spaced)  # rjieba put spaces in
    model = load_model(tmp_path / "storage" / "zh" / "psp_model" / "model")
    assert model.config.pretokenizer == pretokenizer
    assert model.config.languages == ["en", "zh"]
