"""Concatenating pair files from several sources (OPUS + an inbox, ...) into one, streamed."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pyarrow as pa

from ops.pair_files import DEFAULT_BATCH, PairWriter, iter_pair_batches, pair_file_info
from ops.stage_report import StageReport


def concat_pair_files(
    inputs: Sequence[str | Path], output: str | Path, *, batch_size: int = DEFAULT_BATCH
) -> StageReport:
    """Write the pairs of ``inputs``, in order, to one pair file; nothing is dropped.

    All inputs must have the same languages. If any has a score column, the output has one and
    pairs from inputs without scores get NaN (the paraphrase filter drops them as
    ``score_missing``).

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
    report = StageReport("concat")
    with PairWriter(output, src_lang=src_lang, tgt_lang=tgt_lang, with_score=with_score) as writer:
        for path, *_, has_score in infos:
            for batch in iter_pair_batches(path, batch_size):
                report.n_in += batch.num_rows
                if with_score and not has_score:
                    nan = pa.array(np.full(batch.num_rows, np.nan, dtype=np.float32))
                    columns = [batch.column("src"), batch.column("tgt"), nan]
                    batch = pa.RecordBatch.from_arrays(columns, schema=writer.schema)
                writer.write_batch(batch)
                report.n_out += batch.num_rows
    return report.finish()
