"""The preparation chain end to end: resume semantics on a generated English-German corpus, and
real data (en-de, en-zh bitext slices, the ParaNMT-format sample) read back from the HDF5."""

from __future__ import annotations

import gzip
import random
from itertools import islice

import pytest

from ops.filters import FilterConfig
from ops.langid import LanguageIdentifier
from ops.pair_files import PairWriter, iter_pair_chunks, pair_file_info
from ops.paranmt import fetch_paranmt
from ops.prepare import STAGES, prepare_corpus, stage_output
from psp_core.tokenizer import Tokenizer
from psp_core.training_file import TrainingFile
from tests.conftest import require_shared_data

# a small English/German grammar: real words, so that language identification accepts them
SUBJECTS = [
    ("the old man", "der alte mann"),
    ("my little sister", "meine kleine schwester"),
    ("the teacher", "die lehrerin"),
    ("our neighbour", "unser nachbar"),
    ("the young doctor", "der junge arzt"),
    ("his friend", "sein freund"),
]
VERBS = [
    ("reads", "liest"),
    ("buys", "kauft"),
    ("finds", "findet"),
    ("sees", "sieht"),
    ("wants", "will"),
]
OBJECTS = [
    ("a new book", "ein neues buch"),
    ("the red car", "das rote auto"),
    ("a small house", "ein kleines haus"),
    ("the black dog", "den schwarzen hund"),
    ("a cold beer", "ein kaltes bier"),
]
PLACES = [
    ("in the garden", "im garten"),
    ("at the station", "am bahnhof"),
    ("in the city", "in der stadt"),
    ("every morning", "jeden morgen"),
    ("after work", "nach der arbeit"),
    ("with great joy", "mit großer freude"),
]


def grammar_pairs(n: int, seed: int = 0) -> list[tuple[str, str]]:
    rng = random.Random(seed)
    pairs = []
    for _ in range(n):
        parts = [rng.choice(SUBJECTS), rng.choice(VERBS), rng.choice(OBJECTS)]
        parts += rng.sample(PLACES, rng.randint(1, 2))
        english = " ".join(p[0] for p in parts)
        german = " ".join(p[1] for p in parts)
        pairs.append((english[0].upper() + english[1:] + ".", german.capitalize() + "."))
    return pairs


def write_raw(path, pairs, src_lang="en", tgt_lang="de"):
    with PairWriter(path, src_lang=src_lang, tgt_lang=tgt_lang) as writer:
        writer.write([p[0] for p in pairs], [p[1] for p in pairs])
    return path


@pytest.fixture(scope="module")
def identifier() -> LanguageIdentifier:
    return LanguageIdentifier()


def mtimes(work_dir):
    return {p.name: p.stat().st_mtime_ns for p in work_dir.iterdir() if p.is_file()}


def test_chain_runs_and_resumes_without_recomputing(tmp_path, identifier):
    pairs = grammar_pairs(1500) + [("Too short.", "Zu kurz.")] * 3
    raw = write_raw(tmp_path / "raw.parquet", pairs)
    work = tmp_path / "work"
    options = dict(lang="de", kind="bitext", identifier=identifier, vocab_size=300, seed=5)

    first = prepare_corpus(raw, work, **options)
    assert first.skipped == []
    assert list(first.reports) == [s for s in STAGES if s != "segment"]
    for stage, report in first.reports.items():
        assert first.paths[stage] == stage_output(work, stage) and first.paths[stage].is_file()
        assert report.n_in == report.n_out + sum(report.dropped.values())
    assert first.reports["langid"].n_in == len(pairs)
    # the grammar has far fewer distinct sentences than 1500: dedup removes a lot
    assert first.reports["dedup"].n_out < first.reports["dedup"].n_in
    assert first.reports["filters"].n_out <= len(pairs) - 3  # "too short" is below 3 tokens
    n_packed = first.reports["pack"].n_out
    assert n_packed == first.reports["shuffle"].n_out > 100
    before = mtimes(work)

    # nothing to do: every stage is skipped and no file is touched
    again = prepare_corpus(raw, work, **options)
    assert again.skipped == list(again.reports)
    assert mtimes(work) == before
    assert {s: r.as_dict() for s, r in again.reports.items()} == {
        s: r.as_dict() for s, r in first.reports.items()
    }

    # a killed run lost its last output: only that stage runs again
    stage_output(work, "pack").unlink()
    resumed = prepare_corpus(raw, work, **options)
    assert resumed.skipped == ["langid", "filters", "dedup", "shuffle", "spm"]
    after = mtimes(work)
    for name, stamp in before.items():
        if not name.startswith("pack."):
            assert after[name] == stamp, name
    with TrainingFile(resumed.training_file) as data:
        assert len(data) == n_packed

    # a new seed changes the shuffle and everything after it, nothing before
    reseeded = prepare_corpus(raw, work, **{**options, "seed": 6})
    assert reseeded.skipped == ["langid", "filters", "dedup"]


def test_chain_reruns_downstream_of_a_stage_without_its_report(tmp_path, identifier):
    raw = write_raw(tmp_path / "raw.parquet", grammar_pairs(800, seed=2))
    work = tmp_path / "work"
    options = dict(lang="de", kind="bitext", identifier=identifier, vocab_size=250, seed=1)
    prepare_corpus(raw, work, **options)
    # killed between the rename of dedup.parquet and the write of its report
    (work / "dedup.report.json").unlink()
    resumed = prepare_corpus(raw, work, **options)
    assert resumed.skipped == ["langid", "filters"]


def test_chain_refuses_a_missing_raw_file(tmp_path, identifier):
    with pytest.raises(FileNotFoundError, match="raw pair file"):
        prepare_corpus(
            tmp_path / "absent.parquet", tmp_path, lang="de", kind="bitext", identifier=identifier
        )


# ---------------------------------------------------------------------------------------------
# real data


def read_gz_lines(path, limit):
    with gzip.open(path, "rt", encoding="utf-8") as handle:
        return [line.rstrip("\n") for line in islice(handle, limit)]


def assert_hdf5_holds_the_shuffled_text(prepared, *, pretokenized: bool):
    """Pair i of the HDF5 holds row i of the shuffled pair file (what the HDF5 was made of):
    its sentencepiece ids with unknown pieces dropped (one kept if nothing else is left) and cut
    to 100 pieces; sentences without unknown pieces decode back to their normalized text."""
    assert not prepared.reports["pack"].dropped  # so rows line up one to one
    processor = Tokenizer.from_file(prepared.spm_model).processor
    unk = processor.unk_id()
    rows = [
        pair
        for src, tgt, _ in iter_pair_chunks(prepared.paths["shuffle"])
        for pair in zip(src, tgt, strict=True)
    ]
    decoded = 0
    with TrainingFile(prepared.training_file) as data:
        assert len(data) == len(rows)
        source, target = data.read(0, len(data))
    for i, (src, tgt) in enumerate(rows):
        for text, ids in ((src, source.sentence(i).tolist()), (tgt, target.sentence(i).tolist())):
            assert text == text.lower()
            if pretokenized:
                assert "  " not in text
            reference = processor.Encode(text)
            assert ids == ([piece for piece in reference if piece != unk] or reference[:1])[:100]
            if unk not in reference and len(reference) <= 100:
                normalized = processor.Normalize(text).replace("\u2581", " ").strip()
                assert processor.Decode(ids) == normalized
                decoded += 1
    assert decoded >= 0.5 * 2 * len(rows)
    return rows


@pytest.mark.real_data
@pytest.mark.parametrize(("lang", "n_pairs"), [("de", 4000), ("zh", 3000)])
def test_real_bitext_chain(tmp_path, identifier, lang, n_pairs):
    folder = require_shared_data("bitext", f"en-{lang}")
    english = read_gz_lines(folder / "combined.en.gz", n_pairs)
    other = read_gz_lines(folder / f"combined.{lang}.gz", n_pairs)
    raw = write_raw(tmp_path / "raw.parquet", list(zip(english, other, strict=True)), tgt_lang=lang)
    prepared = prepare_corpus(
        raw,
        tmp_path / "work",
        lang=lang,
        kind="bitext",
        identifier=identifier,
        filter_config=FilterConfig(),
        vocab_size=2000,
        seed=0,
        workers=2 if lang == "zh" else 1,  # language ID, jieba and encoding in two processes
    )
    reports = prepared.reports
    assert ("segment" in reports) == (lang == "zh")
    # human translations: language ID and the filters keep most of them
    assert reports["langid"].n_out >= 0.85 * n_pairs
    assert reports["pack"].n_out >= 0.7 * n_pairs
    with TrainingFile(prepared.training_file) as data:
        assert (data.info.lang, data.info.kind, data.info.seed) == (lang, "bitext", 0)
    rows = assert_hdf5_holds_the_shuffled_text(prepared, pretokenized=lang == "zh")
    if lang == "zh":
        # segmented upstream: Chinese words separated by spaces
        assert sum(" " in tgt for _, tgt in rows) > 0.9 * len(rows)


@pytest.mark.real_data
def test_real_paranmt_sample_chain(tmp_path, identifier):
    sample = require_shared_data("paraphrase", "paranmt-format-sample.txt.gz")
    report = fetch_paranmt(sample, tmp_path / "cache", tmp_path / "raw.parquet")
    n_raw, src_lang, tgt_lang, has_score = pair_file_info(tmp_path / "raw.parquet")
    assert (src_lang, tgt_lang, has_score) == ("en", "en", True)
    assert n_raw == report.n_out > 60_000
    prepared = prepare_corpus(
        tmp_path / "raw.parquet",
        tmp_path / "work",
        lang="en",
        kind="paraphrase",
        identifier=identifier,
        vocab_size=2000,
        seed=0,
    )
    reports = prepared.reports
    # 32,802 lines have score >= 0.4; overlap and length filters take some more
    assert 5_000 < reports["filters"].n_out <= 32_802
    assert reports["pack"].n_out >= 0.9 * reports["filters"].n_out
    with TrainingFile(prepared.training_file) as data:
        assert (data.info.lang, data.info.kind) == ("en", "paraphrase")
    assert_hdf5_holds_the_shuffled_text(prepared, pretokenized=False)
