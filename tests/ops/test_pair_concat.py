"""concat_pair_files(): several sources into one pair file, in order, scores padded with NaN."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from ops.pairs.pair_files import PairWriter, iter_pair_chunks, pair_file_info
from ops.sources.pair_concat import concat_pair_files


def write(path: Path, pairs: list[tuple[str, str]], scores=None, tgt_lang="de") -> Path:
    with PairWriter(path, src_lang="en", tgt_lang=tgt_lang, with_score=scores is not None) as w:
        w.write([p[0] for p in pairs], [p[1] for p in pairs], scores)
    return path


def test_inputs_are_concatenated_in_order(tmp_path: Path) -> None:
    a = write(tmp_path / "a.parquet", [("one", "eins"), ("two", "zwei")])
    b = write(tmp_path / "b.parquet", [("three", "drei")])
    empty = write(tmp_path / "empty.parquet", [])
    report = concat_pair_files([a, empty, b], tmp_path / "out.parquet", batch_size=1)
    assert (report.n_in, report.n_out, dict(report.dropped)) == (3, 3, {})
    src, tgt, score = next(iter_pair_chunks(tmp_path / "out.parquet"))
    assert (src, tgt, score) == (["one", "two", "three"], ["eins", "zwei", "drei"], None)
    assert pair_file_info(tmp_path / "out.parquet") == (3, "en", "de", False)


def test_scores_are_kept_and_missing_ones_are_nan(tmp_path: Path) -> None:
    a = write(tmp_path / "a.parquet", [("a b", "c d")], scores=[0.5], tgt_lang="en")
    b = write(tmp_path / "b.parquet", [("e f", "g h")], tgt_lang="en")
    concat_pair_files([a, b], tmp_path / "out.parquet")
    _, _, score = next(iter_pair_chunks(tmp_path / "out.parquet"))
    assert score[0] == 0.5 and math.isnan(score[1])


def test_different_languages_or_no_input_are_errors(tmp_path: Path) -> None:
    a = write(tmp_path / "a.parquet", [("one", "eins")])
    b = write(tmp_path / "b.parquet", [("one", "un")], tgt_lang="fr")
    with pytest.raises(ValueError, match="en-fr.*en-de.*languages differ"):
        concat_pair_files([a, b], tmp_path / "out.parquet")
    assert not (tmp_path / "out.parquet").exists()
    with pytest.raises(ValueError, match="at least one"):
        concat_pair_files([], tmp_path / "out.parquet")
