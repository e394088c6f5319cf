from pathlib import Path

import pytest

from ops.cleaning.segmentation import CACHE_FILE, segment_pairs
from ops.pairs.pair_files import PairWriter, iter_pair_chunks, iter_pairs
from ops.sources.text_io import read_aligned
from psp_core.tokenization.tokenizer import make_pretokenizer
from tests.conftest import require_shared_data

PAIRS = [
    ("the weather is lovely today.", "今天天气很好，我们去海滩。"),
    ("28-year-old chef found dead", "28岁厨师被发现死于旧金山一家商场"),
    ("hello,  world", "我爱北京天安门"),
    ("", ""),
]


def write_pairs(path: Path, pairs, *, scores=None) -> Path:
    with PairWriter(path, src_lang="en", tgt_lang="zh", with_score=scores is not None) as w:
        w.write([p[0] for p in pairs], [p[1] for p in pairs], scores)
    return path


def test_segments_both_sides_like_the_model_tokenizer(tmp_path: Path) -> None:
    source = write_pairs(tmp_path / "in.parquet", PAIRS, scores=[0.5, 0.6, 0.7, 0.8])
    report = segment_pairs(source, tmp_path / "out.parquet", cache_dir=tmp_path / "cache")
    assert (report.n_in, report.n_out, dict(report.dropped)) == (4, 4, {})
    segment = make_pretokenizer("jieba")
    ((src, tgt, score),) = iter_pair_chunks(tmp_path / "out.parquet")
    assert src == [segment(s) for s, _ in PAIRS] and tgt == [segment(t) for _, t in PAIRS]
    assert tgt[2] == "我 爱 北京 天安门" and src[2] == "hello , world"
    assert score == pytest.approx([0.5, 0.6, 0.7, 0.8])
    assert (tmp_path / "cache" / CACHE_FILE).is_file()


def test_workers_keep_the_order(tmp_path: Path) -> None:
    pairs = [(f"line {i}", f"第{i}行，{PAIRS[i % 3][1]}") for i in range(200)]
    source = write_pairs(tmp_path / "in.parquet", pairs)
    segment_pairs(source, tmp_path / "one.parquet", cache_dir=tmp_path / "c", batch_size=16)
    segment_pairs(
        source, tmp_path / "two.parquet", cache_dir=tmp_path / "c", batch_size=16, workers=2
    )
    assert list(iter_pairs(tmp_path / "one.parquet")) == list(iter_pairs(tmp_path / "two.parquet"))


@pytest.mark.real_data
def test_real_chinese_is_segmented(tmp_path: Path) -> None:
    folder = require_shared_data("bitext", "en-zh")
    pairs = []
    for pair in read_aligned(folder / "combined.en.gz", folder / "combined.zh.gz"):
        pairs.append(pair)
        if len(pairs) == 2000:
            break
    source = write_pairs(tmp_path / "in.parquet", pairs)
    report = segment_pairs(source, tmp_path / "out.parquet", cache_dir=tmp_path / "cache")
    assert report.n_out == 2000
    segmented = [t for _, t in iter_pairs(tmp_path / "out.parquet")]
    # nearly every Chinese line splits into several words, and no character is lost
    assert sum(" " in t for t in segmented) > 0.95 * len(segmented)
    assert [t.replace(" ", "") for t in segmented] == [t.replace(" ", "") for _, t in pairs]


@pytest.mark.parametrize("workers", [1, 2])
def test_rjieba_segments_like_its_pretokenizer_in_any_number_of_workers(
    tmp_path: Path, workers: int
) -> None:
    pairs = [(f"line {i}", f"第{i}行，{PAIRS[i % 3][1]}") for i in range(100)]
    source = write_pairs(tmp_path / "in.parquet", pairs)
    output = tmp_path / "out.parquet"
    report = segment_pairs(
        source, output, cache_dir=tmp_path / "c", segmenter="rjieba", workers=workers
    )
    assert report.stage == "segment_rjieba" and report.n_out == 100
    segment = make_pretokenizer("rjieba")
    assert list(iter_pairs(output)) == [(segment(s), segment(t)) for s, t in pairs]
    assert segment("我爱北京天安门") == "我 爱 北京 天安门"
    assert not (tmp_path / "c" / CACHE_FILE).exists()  # jieba's cache is jieba's alone


def test_the_cache_lands_in_the_stage_folder_even_when_jieba_was_loaded_before(
    tmp_path: Path,
) -> None:
    """A process that loaded jieba before (another stage, another test) still writes the
    dictionary cache where the stage's worker processes will read it."""
    import jieba

    from ops.cleaning.segmentation import configure_jieba

    jieba.setLogLevel(60)
    configure_jieba(tmp_path / "first")
    segment = configure_jieba(tmp_path / "second")
    assert (tmp_path / "second" / CACHE_FILE).is_file()
    assert segment("我爱北京天安门") == "我 爱 北京 天安门"
