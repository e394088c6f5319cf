"""Concatenating pair files from several sources (OPUS + an inbox, ...) into one, streamed."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pyarrow as pa

from ops.pairs.pair_files import (
    CORPUS,
    DEFAULT_BATCH,
    PairWriter,
    has_corpus_column,
    iter_pair_batches,
    pair_file_info,
)
from ops.stage_report import StageReport


def concat_pair_files(
    inputs: Sequence[str | Path], output: str | Path, *, batch_size: int = DEFAULT_BATCH
) -> StageReport:
    """Write the pairs of ``inputs``, in order, to one pair file; nothing is dropped.

    All inputs must have the same languages. If any has a score column, the output has one and
    pairs from inputs without scores get NaN (no score: the paraphrase filter does not judge
    them by score, see :func:`ops.cleaning.filters.filter_pairs`). If any has a ``corpus`` column, so has the output, and the pairs of an
    input without one are labelled with the input's name (``part-inbox.parquet``: ``inbox``).

    Raises:
        ValueError: no inputs, or inputs whose languages differ (naming both files).
    """
    if not inputs:
        raise ValueError("concat_pair_files needs at least one input pair file")
    infos = [(Path(path), *pair_file_info(path)[1:]) for path in inputs]
    first_path, src_lang, tgt_lang, _ = infos[0]
    for path, src, tgt, _ in infos[1:]:
        if (src, tgt) != (src_lang, tgt_lang):
            raise ValueError(
                f"cannot concatenate {path} ({src}-{tgt}) with {first_path} "
                f"({src_lang}-{tgt_lang}): the languages differ"
            )
    with_score = any(has_score for *_, has_score in infos)
    with_corpus = any(has_corpus_column(path) for path, *_ in infos)
    report = StageReport("concat")
    with PairWriter(
        output,
        src_lang=src_lang,
        tgt_lang=tgt_lang,
        with_score=with_score,
        with_corpus=with_corpus,
    ) as writer:
        for path, *_, has_score in infos:
            for batch in iter_pair_batches(path, batch_size):
                report.n_in += batch.num_rows
                columns = [batch.column("src"), batch.column("tgt")]
                if with_score:
                    columns.append(
                        batch.column("score")
                        if has_score
                        else pa.array(np.full(batch.num_rows, np.nan, dtype=np.float32))
                    )
                if with_corpus:
                    columns.append(
                        batch.column(CORPUS)
                        if CORPUS in batch.schema.names
                        else pa.repeat(pa.scalar(_label(path)), batch.num_rows)
                    )
                writer.write_batch(pa.RecordBatch.from_arrays(columns, schema=writer.schema))
                report.n_out += batch.num_rows
    return report.finish()


def _label(path: Path) -> str:
    """The corpus label of a pair file without a ``corpus`` column: its name, less ``part-``."""
    return path.name.split(".")[0].removeprefix("part-")
