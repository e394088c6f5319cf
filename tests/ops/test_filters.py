import gzip
import math
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from ops.cleaning.filters import (
    FilterConfig,
    filter_pairs,
    mean_token_counts,
    trigram_overlap,
    trigram_overlaps,
    whitespace_token_counts,
    word_tokenize,
)
from ops.pairs.pair_files import PairWriter, iter_pair_chunks
from tests.conftest import require_shared_data


def write_pairs(path: Path, pairs, *, src_lang="en", tgt_lang="de", scores=None) -> Path:
    with PairWriter(path, src_lang=src_lang, tgt_lang=tgt_lang, with_score=scores is not None) as w:
        w.write([p[0] for p in pairs], [p[1] for p in pairs], scores)
    return path


def words(n: int, prefix: str = "w") -> str:
    return " ".join(f"{prefix}{i}" for i in range(n))


@pytest.mark.parametrize(
    ("text", "tokens"),
    [
        ("don't stop", ["do", "n't", "stop"]),
        ("it's 3.14, isn't it?", ["it", "'s", "3.14", ",", "is", "n't", "it", "?"]),
        (
            "i cannot go -- gonna wait...",
            ["i", "can", "not", "go", "--", "gon", "na", "wait", "..."],
        ),
        ("o'neill's well-known \"quote\"", ["o'neill", "'s", "well-known", '"', "quote", '"']),
        ("1,000 people at 10:30.", ["1,000", "people", "at", "10:30", "."]),
        ("the end. next (a) b;c", ["the", "end", ".", "next", "(", "a", ")", "b", ";", "c"]),
        ("we'll see what you've done", ["we", "'ll", "see", "what", "you", "'ve", "done"]),
        ("", []),
    ],
)
def test_word_tokenize_splits_like_treebank(text: str, tokens: list[str]) -> None:
    assert word_tokenize(text) == tokens


TRIGRAM_CASES = [
    # (first, second, overlap): hand-checked
    ("a b c d", "a b c d", 1.0),
    ("a b", "a b c d", 0.0),  # the side with fewer trigrams has none
    ("", "", 0.0),
    ("a b c", "x a b c y", 1.0),  # fewer = first: its 1 trigram occurs in the second
    ("x a b c y", "a b c", 1.0),  # same, whichever side comes first
    # repeats: (a b c) (b c a) (c a b) (a b c) vs 6 trigrams of the second; (a b c) counts twice
    ("a b c a b c", "a b c d e f g h", 0.5),
    ("a b c d", "a b c e", 0.5),  # tie: the source side's 2 trigrams, 1 found
    ("The cat sat.", "the CAT sat .", 1.0),  # lowercased; "." is a token on both sides
    ("i don't know you", "i do n't know him", 2 / 3),
    ("one two three four five", "five four three two one", 0.0),
]


@pytest.mark.parametrize(("first", "second", "overlap"), TRIGRAM_CASES)
def test_trigram_overlap_definition(first: str, second: str, overlap: float) -> None:
    assert trigram_overlap(first, second) == pytest.approx(overlap)


def test_scorers_work_on_batches() -> None:
    firsts, seconds, expected = zip(*TRIGRAM_CASES, strict=True)
    np.testing.assert_allclose(trigram_overlaps(firsts, seconds), expected)
    texts = pa.array(["", " a  b ", "a\u00a0b\tc", "one"])
    np.testing.assert_array_equal(whitespace_token_counts(texts), [0, 2, 3, 1])
    np.testing.assert_array_equal(mean_token_counts(["a b", "a"], ["a b c", "a"]), [2.5, 1.0])


BITEXT_CASES = [
    # (src, tgt, reason or None = kept)
    (words(2), words(50), "src_too_short"),
    (words(3), "x", None),  # only the English side counts
    (words(100), words(3), None),
    (words(101), words(3), "src_too_long"),
    ("  a   b  ", words(9), "src_too_short"),
]


def test_bitext_filter_table(tmp_path: Path) -> None:
    source = write_pairs(tmp_path / "in.parquet", [(s, t) for s, t, _ in BITEXT_CASES])
    report = filter_pairs(source, tmp_path / "out.parquet", kind="bitext")
    expected_drops: dict[str, int] = {}
    for _, _, reason in BITEXT_CASES:
        if reason:
            expected_drops[reason] = expected_drops.get(reason, 0) + 1
    assert report.as_dict()["dropped"] == expected_drops
    kept = [(s, t) for s, t, reason in BITEXT_CASES if reason is None]
    ((src, tgt, score),) = iter_pair_chunks(tmp_path / "out.parquet")
    assert list(zip(src, tgt, strict=True)) == kept and score is None


PARAPHRASE_CASES = [
    # (reference, paraphrase, score, reason or None = kept); different words keep overlap at 0
    (words(4), words(5, "v"), 0.8, "too_short"),  # mean 4.5
    (words(4), words(6, "v"), 0.8, None),  # mean 5
    (words(40), words(40, "v"), 0.8, None),
    (words(40), words(41, "v"), 0.8, "too_long"),  # mean 40.5
    (words(3), words(3, "v"), 0.1, "too_short"),  # first failing filter wins
    (words(6), words(6, "v"), 0.39, "score_too_low"),
    (words(6), words(6, "v"), 0.4, None),
    (words(6), words(6, "v"), 1.0, None),
    (words(6), words(6, "v"), 1.01, "score_too_high"),
    (words(6), words(6, "v"), math.nan, None),  # no score (two-column ParaNMT): not filtered
    (words(3), words(3, "v"), math.nan, "too_short"),  # ...by the score; the others apply
    # 10 trigrams in the reference, 7 of them in the paraphrase: overlap 0.7 is kept
    (words(12), words(9) + " x y " + "w10 w11 z", 0.9, None),
    # 8 of 10: 0.8 > 0.7
    (words(12), words(10) + " x y z", 0.9, "trigram_overlap"),
    (words(6), words(6).upper(), 0.9, "trigram_overlap"),  # the overlap is case-blind
]


def test_paraphrase_filter_table(tmp_path: Path) -> None:
    pairs = [(s, t) for s, t, _, _ in PARAPHRASE_CASES]
    scores = [c for _, _, c, _ in PARAPHRASE_CASES]
    source = write_pairs(tmp_path / "in.parquet", pairs, tgt_lang="en", scores=scores)
    report = filter_pairs(source, tmp_path / "out.parquet", kind="paraphrase")
    expected_drops: dict[str, int] = {}
    for *_, reason in PARAPHRASE_CASES:
        if reason:
            expected_drops[reason] = expected_drops.get(reason, 0) + 1
    assert report.as_dict()["dropped"] == expected_drops
    kept = [(s, t, c) for s, t, c, reason in PARAPHRASE_CASES if reason is None]
    ((src, tgt, score),) = iter_pair_chunks(tmp_path / "out.parquet")
    assert list(zip(src, tgt, strict=True)) == [(s, t) for s, t, _ in kept]
    assert score == pytest.approx([c for *_, c in kept], nan_ok=True)
    assert report.as_dict()["notes"] == {"score_filter_skipped": 1}


def test_config_thresholds_are_used(tmp_path: Path) -> None:
    source = write_pairs(tmp_path / "in.parquet", [(words(3), "x"), (words(8), "x")])
    report = filter_pairs(
        source, tmp_path / "out.parquet", kind="bitext", config=FilterConfig(bitext_max_tokens=5)
    )
    assert report.as_dict()["dropped"] == {"src_too_long": 1}


def test_bad_requests_are_clear_errors(tmp_path: Path) -> None:
    source = write_pairs(tmp_path / "in.parquet", [(words(6), words(6))], tgt_lang="en")
    with pytest.raises(ValueError, match="no score column"):
        filter_pairs(source, tmp_path / "out.parquet", kind="paraphrase")
    with pytest.raises(ValueError, match="unknown kind 'opus'"):
        filter_pairs(source, tmp_path / "out.parquet", kind="opus")


@pytest.mark.real_data
def test_real_paranmt_sample_drops_low_scores(tmp_path: Path) -> None:
    path = require_shared_data("paraphrase", "paranmt-format-sample.txt.gz")
    with gzip.open(path, "rt", encoding="utf-8") as handle:
        rows = [line.rstrip("\n").split("\t") for line in handle]
    scores = [float(row[2]) for row in rows]
    source = write_pairs(
        tmp_path / "in.parquet", [(r[0], r[1]) for r in rows], tgt_lang="en", scores=scores
    )
    report = filter_pairs(source, tmp_path / "out.parquet", kind="paraphrase")
    low = sum(score < 0.4 for score in scores)
    assert 0.4 < low / len(rows) < 0.6
    # every low-score pair is dropped, as score_too_low unless a length filter came first
    assert low - 100 < report.dropped["score_too_low"] <= low
    assert report.n_out <= len(rows) - low
    kept_scores = np.concatenate(
        [np.asarray(s) for *_, s in iter_pair_chunks(tmp_path / "out.parquet")]
    )
    assert kept_scores.min() >= np.float32(0.4)
