"""Shuffling a pair file out of core: scatter rows to random buckets, permute each bucket.

Pass 1 streams the input and sends every row to one of ``n_buckets`` temporary Arrow IPC files,
chosen uniformly at random (a seeded :class:`numpy.random.Generator`; rows are grouped per bucket
with one ``argsort`` and Arrow ``take`` per batch, no per-row Python). Pass 2 reads one bucket at a
time, applies a random permutation to it and appends it to the output. Concatenating independently
permuted buckets of a uniformly random partition gives a uniformly random order of the whole file.

:func:`shuffled_batches` yields the shuffled rows without writing them (the encoding consumes
them directly); :func:`shuffle_pairs` writes them to a pair file.

Memory is one bucket (about ``bucket_rows`` rows) plus a few slices of one row group each being
written; disk is one extra copy of the data (LZ4-compressed), removed as soon as it is consumed, and
in any case when the function leaves, even on error.
"""

from __future__ import annotations

import logging
import math
import os
import tempfile
import time
from collections.abc import Iterator
from contextlib import closing
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.ipc as ipc
import pyarrow.parquet as pq

from ops.pairs.pair_files import (
    ROW_GROUP,
    PairWriter,
    iter_pair_batches,
    pair_file_info,
)
from ops.stage_report import StageReport

log = logging.getLogger(__name__)

DEFAULT_BUCKET_ROWS = 250_000
_SCATTER_BATCH = 131_072


def bucket_count(n_rows: int, bucket_rows: int = DEFAULT_BUCKET_ROWS) -> int:
    """How many buckets ``n_rows`` rows need so that a bucket holds about ``bucket_rows`` rows."""
    if bucket_rows < 1:
        raise ValueError(f"bucket_rows must be at least 1, got {bucket_rows}")
    return max(1, math.ceil(n_rows / bucket_rows))


def shuffle_pairs(
    input: str | Path,
    output: str | Path,
    *,
    seed: int,
    work_dir: str | Path,
    bucket_rows: int = DEFAULT_BUCKET_ROWS,
) -> StageReport:
    """Write the rows of the pair file ``input`` to ``output`` in a seeded random order.

    Args:
        input: pair file to shuffle (any columns of the pair-file schema are kept).
        output: pair file written atomically (temporary name, renamed when complete).
        seed: the same seed and input give the same order; another seed another order.
        work_dir: directory for the temporary buckets (needs about the input's size free).
        bucket_rows: expected rows per bucket; peak memory is about one bucket.
    """
    report = StageReport("shuffle")
    with (
        PairWriter.like(input, output) as writer,
        closing(
            shuffled_batches(
                input, seed=seed, work_dir=work_dir, bucket_rows=bucket_rows, report=report
            )
        ) as batches,
    ):
        for batch in batches:
            # the writer thread compresses one slice while the next is gathered
            writer.write_batch(batch)
    return report.finish()


def shuffled_batches(
    input: str | Path,
    *,
    seed: int,
    work_dir: str | Path,
    report: StageReport,
    bucket_rows: int = DEFAULT_BUCKET_ROWS,
) -> Iterator[pa.RecordBatch]:
    """The rows of ``input`` in the seeded random order of :func:`shuffle_pairs`, as record
    batches of at most ``ROW_GROUP`` rows, without writing the shuffled file: what a stage that
    reads the shuffled pairs once (the encoding) consumes directly.

    ``report`` counts the rows and, in ``seconds``, the time spent inside this generator (the
    shuffle's own cost, not the consumer's). The buckets are removed when the generator
    finishes or is closed (use :func:`contextlib.closing` so an error closes it at once).
    """
    clock = time.perf_counter()
    n_rows = pair_file_info(input)[0]
    n_buckets = bucket_count(n_rows, bucket_rows)
    rng = np.random.default_rng(seed)
    Path(work_dir).mkdir(parents=True, exist_ok=True)
    log.info("shuffling %d pairs of %s through %d buckets", n_rows, input, n_buckets)
    try:
        # named like every temporary, so the stale-temp sweep removes it after a kill -9
        with tempfile.TemporaryDirectory(
            prefix="shuffle-", suffix=f".tmp-{os.getpid()}", dir=work_dir
        ) as bucket_dir:
            bucket_paths = [Path(bucket_dir) / f"bucket-{i:05d}.arrow" for i in range(n_buckets)]
            report.n_in = _scatter(input, bucket_paths, rng)
            if report.n_in != n_rows:
                raise ValueError(f"{input}: footer says {n_rows} rows but {report.n_in} were read")
            for path in bucket_paths:
                with pa.OSFile(str(path), "rb") as source:
                    bucket = ipc.open_file(source).read_all().combine_chunks()
                path.unlink()
                permutation = rng.permutation(bucket.num_rows)
                # a slice at a time: at most a few slices wait besides the bucket
                for start in range(0, bucket.num_rows, ROW_GROUP):
                    rows = bucket.take(pa.array(permutation[start : start + ROW_GROUP]))
                    for batch in rows.to_batches():
                        report.n_out += batch.num_rows
                        report.seconds += time.perf_counter() - clock
                        yield batch
                        clock = time.perf_counter()
                del bucket
            if report.n_out != report.n_in:
                raise AssertionError(
                    f"shuffle of {input}: {report.n_in} rows in, {report.n_out} out"
                )
    finally:
        report.seconds += time.perf_counter() - clock


def _scatter(input: str | Path, bucket_paths: list[Path], rng: np.random.Generator) -> int:
    """Append every row of ``input`` to a uniformly random bucket file; return the row count."""
    n_buckets = len(bucket_paths)
    schema = pq.ParquetFile(input).schema_arrow
    options = ipc.IpcWriteOptions(compression="lz4")
    writers: list[ipc.RecordBatchFileWriter] = []
    n_rows = 0
    try:
        for path in bucket_paths:
            writers.append(ipc.new_file(str(path), schema, options=options))
        for batch in iter_pair_batches(input, _SCATTER_BATCH):
            assignment = rng.integers(0, n_buckets, size=batch.num_rows)
            order = np.argsort(assignment, kind="stable")
            grouped = batch.take(pa.array(order))
            ends = np.cumsum(np.bincount(assignment, minlength=n_buckets))
            start = 0
            for writer, end in zip(writers, ends.tolist(), strict=True):
                if end > start:
                    writer.write_batch(grouped.slice(start, end - start))
                start = end
            n_rows += batch.num_rows
    finally:
        for writer in writers:
            writer.close()
    return n_rows
