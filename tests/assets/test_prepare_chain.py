"""The preparation assets (prepare_data_job's selection) as a chain: what a failed, killed or
re-seeded run recomputes, and real data (en-de and en-zh bitext slices, the ParaNMT-format
sample) carried from raw pairs into the training HDF5 exactly as sentencepiece encodes it."""

from __future__ import annotations

import gzip
from itertools import islice
from pathlib import Path

import pytest
from dagster import DagsterEventType, materialize

from assets.settings.resources import ComputeResource
from ops.pairs.pair_files import iter_pairs, pair_file_info
from pipelines.definitions import defs
from psp_core.tokenization.tokenizer import Tokenizer
from psp_core.training.training_file import TrainingFile
from tests.conftest import require_shared_data
from tests.ops.opus_server import OpusServer, build_moses_zip
from tests.pipelines.conftest import LANGUAGE_STAGES, loopback_resources
from tests.pipelines.corpora import publish_de

#: prepare_data_job's assets, in pipeline order.
PREPARE = LANGUAGE_STAGES[: LANGUAGE_STAGES.index("training_data") + 1]
ASSETS = [defs.get_assets_def(name) for name in PREPARE]
#: the stages before the vocabulary's, and before the training file's
BEFORE_SPM = PREPARE[: PREPARE.index("sentencepiece_model")]
BEFORE_DATA = PREPARE[: PREPARE.index("training_data")]


def test_the_stages_are_prepare_data_jobs() -> None:
    job = defs.resolve_job_def("prepare_data_job")
    assert {key.to_user_string() for key in job.asset_layer.executable_asset_keys} == set(PREPARE)


def config(vocab_size: int, seed: int = 1) -> dict:
    return {
        "ops": {
            "sentencepiece_model": {"config": {"vocab_size": vocab_size}},
            "training_data": {"config": {"seed": seed}},
        }
    }


def reused(result) -> dict[str, bool]:
    """Each materialized stage -> whether it reused its output."""
    return {
        event.asset_key.to_user_string(): event.materialization.metadata["reused"].value
        for event in result.get_asset_materialization_events()
    }


def files(root: Path, stages: list[str]) -> dict[str, tuple[int, bytes]]:
    """Every file of ``stages`` -> (modification time, bytes)."""
    return {
        str(path.relative_to(root)): (path.stat().st_mtime_ns, path.read_bytes())
        for stage in stages
        for path in sorted((root / stage).iterdir())
        if path.is_file()
    }


@pytest.fixture()
def de_world(opus_server: OpusServer, tmp_path: Path) -> dict:
    publish_de(opus_server, build_moses_zip)
    resources = loopback_resources(opus_server, tmp_path / "storage", tmp_path / "eval")
    return {"resources": resources, "root": tmp_path / "storage" / "de"}


def test_a_failed_run_resumes_at_the_stage_that_failed(de_world: dict) -> None:
    resources, root = de_world["resources"], de_world["root"]
    # sentencepiece refuses a vocabulary of 0 pieces: the run stops there
    failed = materialize(
        ASSETS, partition_key="de", resources=resources, run_config=config(0), raise_on_error=False
    )
    assert not failed.success
    assert list(reused(failed)) == BEFORE_SPM
    failures = [e for e in failed.all_events if e.event_type == DagsterEventType.STEP_FAILURE]
    assert [e.step_key for e in failures] == ["sentencepiece_model"]
    assert "vocab_size" in failures[0].step_failure_data.error.to_string()
    assert not (root / "sentencepiece_model" / "manifest.json").exists()
    assert not (root / "training_data").exists()
    before = files(root, BEFORE_SPM)

    resumed = materialize(ASSETS, partition_key="de", resources=resources, run_config=config(500))
    assert resumed.success
    assert reused(resumed) == dict.fromkeys(BEFORE_SPM, True) | {
        "sentencepiece_model": False,
        "training_data": False,
    }
    assert files(root, BEFORE_SPM) == before  # not one file of the finished stages rewritten


def test_a_rerun_recomputes_only_what_was_lost_or_changed(de_world: dict) -> None:
    resources, root = de_world["resources"], de_world["root"]
    first = materialize(ASSETS, partition_key="de", resources=resources, run_config=config(500))
    assert first.success and not any(reused(first).values())
    packed = (root / "training_data" / "train.h5").read_bytes()

    # a killed run (or a user) lost the last stage's output: only that stage runs again
    (root / "training_data" / "train.h5").unlink()
    before = files(root, BEFORE_DATA)
    again = materialize(ASSETS, partition_key="de", resources=resources, run_config=config(500))
    assert reused(again) == dict.fromkeys(BEFORE_DATA, True) | {"training_data": False}
    assert files(root, BEFORE_DATA) == before
    assert (root / "training_data" / "train.h5").read_bytes() == packed  # the same seed and input

    # killed between a stage's output and its manifest: that stage runs again and writes the
    # same pairs, so the stages after it keep theirs
    deduplicated = (root / "deduplicated_pairs" / "pairs.parquet").read_bytes()
    (root / "deduplicated_pairs" / "manifest.json").unlink()
    third = materialize(ASSETS, partition_key="de", resources=resources, run_config=config(500))
    assert [name for name, was_reused in reused(third).items() if not was_reused] == [
        "deduplicated_pairs"
    ]
    assert (root / "deduplicated_pairs" / "pairs.parquet").read_bytes() == deduplicated

    # a new shuffle seed changes the training file and nothing before it
    before = files(root, BEFORE_DATA)
    reseeded = materialize(
        ASSETS, partition_key="de", resources=resources, run_config=config(500, seed=2)
    )
    assert [name for name, was_reused in reused(reseeded).items() if not was_reused] == [
        "training_data"
    ]
    assert files(root, BEFORE_DATA) == before
    assert (root / "training_data" / "train.h5").read_bytes() != packed


# ---------------------------------------------------------------------------------------------
# real data


def metadata_of(result, name: str) -> dict:
    (event,) = result.asset_materializations_for_node(name)
    return {key: value.value for key, value in event.metadata.items()}


def assert_training_file_holds_the_pairs(root: Path, *, pretokenized: bool) -> list[tuple]:
    """The training HDF5 holds the deduplicated pairs (in shuffled order), each side as its
    sentencepiece ids with unknown pieces dropped (one kept if nothing else is left) and cut to
    100 pieces; sentences without unknown pieces decode back to their normalized text."""
    processor = Tokenizer.from_file(root / "sentencepiece_model" / "sentencepiece.model").processor
    unk = processor.unk_id()
    pairs = list(iter_pairs(root / "deduplicated_pairs" / "pairs.parquet"))

    def expected(text: str) -> tuple[int, ...]:
        reference = processor.Encode(text)
        return tuple(([piece for piece in reference if piece != unk] or reference[:1])[:100])

    with TrainingFile(root / "training_data" / "train.h5") as data:
        assert len(data) == len(pairs)
        source, target = data.read(0, len(data))
    packed = [
        (tuple(source.sentence(i).tolist()), tuple(target.sentence(i).tolist()))
        for i in range(len(pairs))
    ]
    assert sorted(packed) == sorted((expected(src), expected(tgt)) for src, tgt in pairs)
    assert packed != [(expected(src), expected(tgt)) for src, tgt in pairs]  # shuffled
    decoded = 0
    for src, tgt in pairs:
        for text in (src, tgt):
            assert text == text.lower()
            if pretokenized:
                assert "  " not in text
            reference = processor.Encode(text)
            if unk not in reference and len(reference) <= 100:
                normalized = processor.Normalize(text).replace("\u2581", " ").strip()
                assert processor.Decode(list(expected(text))) == normalized
                decoded += 1
    assert decoded >= 0.5 * 2 * len(pairs)
    return pairs


def read_gz_lines(path: Path, limit: int) -> list[str]:
    with gzip.open(path, "rt", encoding="utf-8") as handle:
        return [line.rstrip("\n") for line in islice(handle, limit)]


@pytest.mark.slow
@pytest.mark.real_data
@pytest.mark.parametrize(("lang", "n_pairs"), [("de", 4000), ("zh", 3000)])
def test_real_bitext_through_the_prepare_assets(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, lang: str, n_pairs: int
) -> None:
    folder = require_shared_data("bitext", f"en-{lang}")
    bitext = tmp_path / "bitext"
    bitext.mkdir()
    for code in ("en", lang):
        lines = read_gz_lines(folder / f"combined.{code}.gz", n_pairs)
        (bitext / f"combined.{code}").write_text("\n".join(lines) + "\n", encoding="utf-8")
    registry = tmp_path / "languages.toml"
    registry.write_text(
        f'[languages.{lang}]\nsource = "local"\nlocal_dir = "{bitext}"\n'
        + ('pretokenizer = "jieba"\n' if lang == "zh" else "")
    )
    monkeypatch.setenv("PSP_LANGUAGES", str(registry))
    resources = loopback_resources(OpusServer(), tmp_path / "storage", tmp_path / "eval")
    # zh: language ID, jieba and encoding in two worker processes
    workers = 2 if lang == "zh" else 1
    resources["compute"] = ComputeResource(device="cpu", threads=1, workers=workers)
    result = materialize(ASSETS, partition_key=lang, resources=resources, run_config=config(2000))
    assert result.success
    # human translations: language ID and the filters keep most of them
    assert metadata_of(result, "langid_filtered_pairs")["pairs_out"] >= 0.85 * n_pairs
    assert metadata_of(result, "training_data")["n_pairs"] >= 0.7 * n_pairs
    root = tmp_path / "storage" / lang
    with TrainingFile(root / "training_data" / "train.h5") as data:
        assert (data.info.lang, data.info.kind, data.info.seed) == (lang, "bitext", 1)
    pairs = assert_training_file_holds_the_pairs(root, pretokenized=lang == "zh")
    if lang == "zh":  # segmented upstream: Chinese words separated by spaces
        assert sum(" " in tgt for _, tgt in pairs) > 0.9 * len(pairs)


@pytest.mark.slow
@pytest.mark.real_data
def test_real_paranmt_sample_through_the_prepare_assets(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    sample = require_shared_data("paraphrase", "paranmt-format-sample.txt.gz")
    registry = tmp_path / "languages.toml"
    registry.write_text('[languages.en]\nsource = "paranmt"\n')
    monkeypatch.setenv("PSP_LANGUAGES", str(registry))
    resources = loopback_resources(
        OpusServer(), tmp_path / "storage", tmp_path / "eval", paranmt_url=str(sample)
    )
    result = materialize(ASSETS, partition_key="en", resources=resources, run_config=config(2000))
    assert result.success
    root = tmp_path / "storage" / "en"
    n_raw, src_lang, tgt_lang, has_score = pair_file_info(root / "raw_pairs" / "pairs.parquet")
    assert (src_lang, tgt_lang, has_score) == ("en", "en", True)
    assert n_raw == metadata_of(result, "raw_pairs")["pairs_out"] > 60_000
    # 32,802 lines have score >= 0.4; the overlap and length filters take some more
    filtered = metadata_of(result, "length_filtered_pairs")["pairs_out"]
    assert 5_000 < filtered <= 32_802
    assert metadata_of(result, "training_data")["n_pairs"] >= 0.9 * filtered
    with TrainingFile(root / "training_data" / "train.h5") as data:
        assert (data.info.lang, data.info.kind) == ("en", "paraphrase")
    assert_training_file_holds_the_pairs(root, pretokenized=False)
