"""Temperature sampling of several languages' pair files into the multilingual model's pairs."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from ops.pairs.multi_pairs import LanguagePairs, sample_languages, temperature_counts
from ops.pairs.pair_files import PairWriter, iter_pair_batches
from psp_core.tokenization.tokenizer import make_pretokenizer


def test_alpha_one_is_the_union_and_alpha_zero_is_equal_shares() -> None:
    counts = {"de": 9000, "tr": 1000, "en": 0}
    assert temperature_counts(counts, 1.0) == counts
    assert temperature_counts(counts, 0.0) == {"de": 5000, "tr": 5000, "en": 0}


@pytest.mark.parametrize("alpha", [0.3, 0.5, 0.7])
def test_temperature_keeps_the_total_and_lifts_small_languages(alpha: float) -> None:
    counts = {"de": 95_379, "fr": 79_254, "tr": 21_506, "ar": 25_136, "zh": 1}
    taken = temperature_counts(counts, alpha)
    assert sum(taken.values()) == sum(counts.values())
    total = sum(counts.values())
    for code, n in counts.items():
        expected = total * n**alpha / sum(m**alpha for m in counts.values())
        assert abs(taken[code] - expected) < 1  # exact up to the rounding
    assert taken["tr"] > counts["tr"] and taken["de"] < counts["de"]


def write_pairs(path: Path, src: list[str], tgt: list[str]) -> Path:
    with PairWriter(path, src_lang="en", tgt_lang="xx") as writer:
        writer.write(src, tgt)
    return path


def read_all(path: Path) -> list[tuple[str, str, str]]:
    rows = []
    for batch in iter_pair_batches(path, 1000):
        rows += zip(*(batch.column(c).to_pylist() for c in ("src", "tgt", "lang")), strict=True)
    return rows


def languages(tmp_path: Path) -> list[LanguagePairs]:
    big = write_pairs(tmp_path / "de.parquet", [f"house {i}" for i in range(900)],
                      [f"haus {i}" for i in range(900)])  # fmt: skip
    small = write_pairs(tmp_path / "zh.parquet", [f"the book {i}" for i in range(100)],
                        [f"我们喜欢读书{i}本" for i in range(100)])  # fmt: skip
    return [LanguagePairs("de", "bitext", big), LanguagePairs("zh", "bitext", small)]


def test_the_sample_is_exact_streamed_and_pretokenized(tmp_path: Path) -> None:
    inputs = languages(tmp_path)
    segment = make_pretokenizer("rjieba_han")
    record = sample_languages(
        inputs, tmp_path / "multi.parquet", alpha=0.3, seed=1, pretokenize=segment, batch_size=64
    )
    rows = read_all(tmp_path / "multi.parquet")
    per_language = Counter(lang for _, _, lang in rows)
    assert per_language == temperature_counts({"de": 900, "zh": 100}, 0.3)
    assert record["languages"]["zh"]["copies"] >= 2  # the small language is repeated
    assert record["n_out"] == len(rows) == 1000 and record["n_in"] == 1000
    # de is a uniform sample without repetition; zh every pair whole copies times plus a sample
    de_rows = Counter(src for src, _, lang in rows if lang == "de")
    assert max(de_rows.values()) == 1
    zh_rows = Counter(tgt for _, tgt, lang in rows if lang == "zh")
    copies = record["languages"]["zh"]["copies"]
    assert set(zh_rows.values()) <= {copies, copies + 1} and len(zh_rows) == 100
    # the multilingual pre-tokenizer: Han runs segmented, the rest untouched
    assert ("the book 7", segment("我们喜欢读书7本"), "zh") in rows
    assert "我们 喜欢 读书" in segment("我们喜欢读书7本")
    # seeded: the same sample again
    again = sample_languages(
        inputs, tmp_path / "again.parquet", alpha=0.3, seed=1, pretokenize=segment, batch_size=64
    )
    assert read_all(tmp_path / "again.parquet") == rows

    def counts(result: dict) -> dict:
        return {code: row["pairs_out"] for code, row in result["languages"].items()}

    assert counts(again) == counts(record)


def test_a_failed_sample_leaves_no_output(tmp_path: Path) -> None:
    inputs = languages(tmp_path)

    def broken(text: str) -> str:
        if text.startswith("haus 5"):
            raise RuntimeError("segmenter crashed")
        return text

    with pytest.raises(RuntimeError, match="segmenter crashed"):
        sample_languages(inputs, tmp_path / "multi.parquet", alpha=0.5, seed=1, pretokenize=broken)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["de.parquet", "zh.parquet"]
