"""Chinese word segmentation (jieba or rjieba) of both sides of a pair file.

The segmenter is ``psp_core.tokenization.tokenizer.make_pretokenizer(name)``, the very function the
model's tokenizer applies at inference, so the text sentencepiece is trained on is the text it
will see. Both sides go through it (the model sees English through the same pre-tokenizer).
jieba builds its prefix dictionary once and caches it in ``cache_dir``; it is pure Python, and
slow, so ``workers`` processes segment batches in parallel.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path

import pyarrow as pa

from ops.ordered_pool import ordered_map
from ops.pairs.pair_files import PairWriter, iter_pair_batches, pair_columns, pair_file_info
from ops.stage_report import StageReport
from psp_core.tokenization.tokenizer import make_pretokenizer

DEFAULT_BATCH = 8_192
CACHE_FILE = "jieba.cache"

# worker-process state for ordered_map (set by _init_worker, in a worker or in this process)
_segment: Callable[[str], str] | None = None


def configure_jieba(cache_dir: str | Path) -> Callable[[str], str]:
    """Point jieba's dictionary cache at ``cache_dir``, quiet its logging, load it; return
    the segmenter (``make_pretokenizer("jieba")``)."""
    import jieba

    cache_dir = Path(cache_dir)
    cache_dir.mkdir(parents=True, exist_ok=True)
    jieba.setLogLevel(logging.WARNING)
    jieba.dt.tmp_dir = str(cache_dir)
    jieba.dt.cache_file = CACHE_FILE
    if jieba.dt.initialized and not (cache_dir / CACHE_FILE).is_file():
        # loaded before in this process with another cache: load again, so that the cache the
        # stage's worker processes read lands in ``cache_dir``
        jieba.dt.initialized = False
    jieba.dt.initialize()
    segment = make_pretokenizer("jieba")
    assert segment is not None
    return segment


def configure_segmenter(name: str, cache_dir: str | Path) -> Callable[[str], str]:
    """The segmenter ``name`` (``jieba`` or ``rjieba``), ready to run."""
    if name == "jieba":
        return configure_jieba(cache_dir)
    segment = make_pretokenizer(name)
    if segment is None:
        raise ValueError(f"pre-tokenizer {name!r} does not segment")
    return segment


def _init_worker(name: str, cache_dir: str) -> None:
    global _segment
    _segment = configure_segmenter(name, cache_dir)


def _segment_sides(columns: tuple[pa.Array, pa.Array]) -> tuple[pa.Array, pa.Array]:
    """Both sides of a batch, in a worker: Arrow text in and out, so neither process pickles
    a list of Python strings (the same protocol as the language-ID workers)."""
    assert _segment is not None
    return tuple(
        pa.array([_segment(text) for text in column.to_pylist()], pa.string()) for column in columns
    )


def segment_pairs(
    input: str | Path,
    output: str | Path,
    *,
    cache_dir: str | Path,
    workers: int = 1,
    batch_size: int = DEFAULT_BATCH,
    segmenter: str = "jieba",
) -> StageReport:
    """Write ``input`` with both sides segmented by ``segmenter`` (``jieba`` or ``rjieba``; the
    tokens joined by single spaces).

    Nothing is dropped; a ``score`` column is passed through. ``workers`` processes segment
    batches in parallel (1 = this process); the output keeps the input order.
    """
    _, src_lang, tgt_lang, has_score = pair_file_info(input)
    report = StageReport(f"segment_{segmenter}")
    with PairWriter(
        output, src_lang=src_lang, tgt_lang=tgt_lang, with_score=has_score, background=True
    ) as writer:
        for batch, (src, tgt) in ordered_map(
            _segment_sides,
            iter_pair_batches(input, batch_size),
            payload=pair_columns,
            workers=workers,
            initializer=_init_worker,
            initargs=(segmenter, str(cache_dir)),
        ):
            report.n_in += batch.num_rows
            columns = [src, tgt]
            if has_score:
                columns.append(batch.column("score"))
            writer.write_batch(pa.RecordBatch.from_arrays(columns, schema=writer.schema))
            report.n_out += batch.num_rows
    return report.finish()
