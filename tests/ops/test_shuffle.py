from collections import Counter
from contextlib import closing

import pyarrow.parquet as pq
import pytest

from ops.pairs.pair_files import PairWriter, iter_pair_chunks, pair_file_info
from ops.pairs.shuffle import bucket_count, shuffle_pairs, shuffled_batches
from ops.stage_report import StageReport


def write_pairs(path, n, *, with_score=False, duplicates=0):
    src = [f"source {i}" for i in range(n)] + ["same"] * duplicates
    tgt = [f"target {i}" for i in range(n)] + ["gleich"] * duplicates
    score = [i / max(n, 1) for i in range(n)] + [0.5] * duplicates if with_score else None
    with PairWriter(path, src_lang="en", tgt_lang="de", with_score=with_score) as writer:
        writer.write(src, tgt, score)
    return path


def read_rows(path):
    rows = []
    for src, tgt, score in iter_pair_chunks(path):
        rows.extend(zip(src, tgt, score or [None] * len(src), strict=True))
    return rows


@pytest.mark.parametrize(
    ("n", "bucket_rows", "with_score"),
    [(0, 10, False), (1, 10, False), (1000, 10_000, False), (5000, 300, True), (2003, 7, False)],
)
def test_shuffle_is_a_permutation_keeping_columns_and_metadata(
    tmp_path, n, bucket_rows, with_score
):
    source = write_pairs(tmp_path / "in.parquet", n, with_score=with_score, duplicates=3)
    report = shuffle_pairs(
        source, tmp_path / "out.parquet", seed=7, work_dir=tmp_path / "w", bucket_rows=bucket_rows
    )
    assert (report.n_in, report.n_out, dict(report.dropped)) == (n + 3, n + 3, {})
    before, after = read_rows(source), read_rows(tmp_path / "out.parquet")
    assert Counter(after) == Counter(before)
    assert pair_file_info(tmp_path / "out.parquet") == (n + 3, "en", "de", with_score)
    if n >= 1000:
        assert after != before
        # rows coming from the first half of the input are spread over the whole output
        first_half = {row for row in before[: n // 2]}
        positions = [i for i, row in enumerate(after) if row in first_half]
        assert min(positions) < n // 10 and max(positions) > n - n // 10


def test_shuffle_is_reproducible_per_seed(tmp_path):
    source = write_pairs(tmp_path / "in.parquet", 3000)

    def order(seed, name):
        shuffle_pairs(source, tmp_path / name, seed=seed, work_dir=tmp_path, bucket_rows=500)
        return [row[0] for row in read_rows(tmp_path / name)]

    assert order(1, "a.parquet") == order(1, "b.parquet")
    assert order(1, "a.parquet") != order(2, "c.parquet")


def test_shuffle_order_is_close_to_uniform(tmp_path):
    # where row 0 lands, over many seeds, is roughly uniform over the 4 quarters of the output
    source = write_pairs(tmp_path / "in.parquet", 40)
    quarters = Counter()
    for seed in range(200):
        shuffle_pairs(source, tmp_path / "o.parquet", seed=seed, work_dir=tmp_path, bucket_rows=8)
        landed = [row[0] for row in read_rows(tmp_path / "o.parquet")].index("source 0")
        quarters[landed // 10] += 1
    assert all(25 <= quarters[q] <= 75 for q in range(4)), quarters


def test_buckets_are_removed_after_success_and_failure(tmp_path):
    source = write_pairs(tmp_path / "in.parquet", 2000)
    work = tmp_path / "work"
    shuffle_pairs(source, tmp_path / "out.parquet", seed=0, work_dir=work, bucket_rows=100)
    assert list(work.iterdir()) == []
    # the output's directory cannot be created: this fails after the buckets were written
    (tmp_path / "not-a-dir").write_text("")
    with pytest.raises(OSError):
        shuffle_pairs(
            source, tmp_path / "not-a-dir" / "out.parquet", seed=0, work_dir=work, bucket_rows=100
        )
    assert list(work.iterdir()) == []


def test_buckets_are_bounded_by_bucket_rows(tmp_path):
    assert [bucket_count(n, 100) for n in (0, 1, 100, 101, 1000)] == [1, 1, 1, 2, 10]
    with pytest.raises(ValueError, match="bucket_rows"):
        bucket_count(10, 0)
    source = write_pairs(tmp_path / "in.parquet", 10_000)
    shuffle_pairs(source, tmp_path / "out.parquet", seed=3, work_dir=tmp_path, bucket_rows=1000)
    # every bucket is written as its own run of row groups; none is far above bucket_rows
    metadata = pq.ParquetFile(tmp_path / "out.parquet").metadata
    sizes = [metadata.row_group(i).num_rows for i in range(metadata.num_row_groups)]
    assert len(sizes) == 10 and max(sizes) < 1300


def test_a_corpus_column_is_shuffled_with_its_pairs(tmp_path) -> None:
    source = tmp_path / "in.parquet"
    with PairWriter(source, src_lang="en", tgt_lang="de", with_corpus=True) as writer:
        writer.write([f"a {i}" for i in range(50)], [f"b {i}" for i in range(50)], None, "A")
        writer.write([f"c {i}" for i in range(30)], [f"d {i}" for i in range(30)], None, "C")
    shuffle_pairs(source, tmp_path / "out.parquet", seed=3, work_dir=tmp_path, bucket_rows=16)
    table = pq.read_table(tmp_path / "out.parquet")
    labels = {"a": "A", "c": "C"}
    rows = zip(table.column("src").to_pylist(), table.column("corpus").to_pylist(), strict=True)
    assert all(labels[src[0]] == corpus for src, corpus in rows)
    assert table.num_rows == 80


def test_the_streamed_shuffle_gives_the_written_shuffle_s_rows_and_cleans_up(tmp_path) -> None:
    """shuffled_batches (what the encoding consumes) yields exactly the rows shuffle_pairs
    writes, and its buckets are gone when it finishes, and when its consumer stops early."""
    source = write_pairs(tmp_path / "in.parquet", 2500, with_score=True)
    shuffle_pairs(source, tmp_path / "out.parquet", seed=5, work_dir=tmp_path, bucket_rows=300)
    work = tmp_path / "stream"
    report = StageReport("shuffle")
    streamed = []
    for batch in shuffled_batches(source, seed=5, work_dir=work, report=report, bucket_rows=300):
        assert list(work.iterdir())  # the buckets exist while it runs
        columns = [batch.column(name).to_pylist() for name in ("src", "tgt", "score")]
        streamed.extend(zip(*columns, strict=True))
    assert streamed == read_rows(tmp_path / "out.parquet")
    assert (report.n_in, report.n_out) == (2500, 2500) and report.seconds > 0
    assert list(work.iterdir()) == []
    with closing(shuffled_batches(source, seed=5, work_dir=work, report=StageReport("s"))) as it:
        next(it)
    assert list(work.iterdir()) == []
