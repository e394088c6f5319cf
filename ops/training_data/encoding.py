"""Encoding a shuffled pair file with the shared sentencepiece model into the training HDF5.

The pair file is streamed in batches; both sides of a batch go to sentencepiece in one call, so
its threads (``Tokenizer.num_threads``) share the work; truncation to ``Tokenizer.max_length``
pieces (the paper's 100) and unknown-piece handling are the tokenizer's. Pairs with a side that
encodes to no ids at all are dropped and counted as ``empty_after_encoding``.

The order of the input is kept: shuffle first (:func:`ops.pairs.shuffle.shuffle_pairs`), because
training reads the HDF5 in contiguous slices.

Worker processes (``workers > 1``): sentencepiece's Python binding holds the GIL for a whole
batch call, so a thread cannot overlap reading, cleaning and the HDF5 write with it; separate
processes can. Each worker gets a batch's two Arrow string columns (they pickle as their
buffers, cheaper than re-reading a row range from Parquet), encodes them with its own
one-thread tokenizer and sends back compact CSR arrays; this process reads, drops empty pairs
and writes, in input order, so the file is the same for any number of workers.

Chinese: the chain segments the text with jieba before sentencepiece is trained
(:func:`ops.cleaning.segmentation.segment_pairs`), so the tokenizer used here must have pre-tokenizer
``"none"``; segmenting again would change the text. The model bundle built for inference later
gets ``"jieba"``, because raw user input is not segmented.
"""

from __future__ import annotations

import gc
import logging
from collections.abc import Iterable, Iterator, Sequence
from contextlib import closing
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ops.ordered_pool import ordered_map
from ops.pairs.pair_files import iter_pair_batches, pair_columns, pair_file_info
from ops.progress import Progress
from ops.stage_report import StageReport
from psp_core.tokenization.csr import TokenBatch
from psp_core.tokenization.tokenizer import Tokenizer
from psp_core.training.training_file import TrainingFileWriter

log = logging.getLogger(__name__)

DEFAULT_ENCODE_BATCH = 32_768
EMPTY_AFTER_ENCODING = "empty_after_encoding"
MAX_PIECES = 100  # the paper truncates every sentence to 100 sentencepiece pieces


def packing_tokenizer(spm_model: str | Path, *, num_threads: int = 2) -> Tokenizer:
    """The tokenizer that encodes a deduplicated (so already lowercased, and for zh already
    jieba-segmented) pair file: no second lowercasing or segmentation on the hot path, the
    paper's truncation. The model bundle keeps ``lowercase`` and gets ``"jieba"`` for zh,
    because raw user input is neither."""
    return Tokenizer.from_file(
        spm_model,
        lowercase=False,
        pretokenizer="none",
        max_length=MAX_PIECES,
        num_threads=num_threads,
    )


def training_file_writer(
    output: str | Path, tokenizer: Tokenizer, *, lang: str, kind: str, seed: int, **more: Any
) -> TrainingFileWriter:
    """A :class:`TrainingFileWriter` whose attrs describe ``tokenizer``'s model (``more``: its
    other arguments, the groups of a file of several languages)."""
    return TrainingFileWriter(
        output,
        vocab_size=tokenizer.vocab_size,
        spm_sha256=tokenizer.sha256,
        lang=lang,
        kind=kind,
        seed=seed,
        **more,
    )


def encode_columns(
    tokenizer: Tokenizer, src: pa.Array, tgt: pa.Array
) -> tuple[TokenBatch, TokenBatch]:
    """Encode a batch's two string columns in this process: one tokenizer call for both sides,
    so that sentencepiece's threads (``tokenizer.num_threads``) share the whole batch."""
    n = len(src)
    both = tokenizer.encode(src.to_pylist() + tgt.to_pylist())
    return both.slice(0, n), both.slice(n, 2 * n)


# worker-process state for ordered_map (set by _init_worker in each worker)
_worker_tokenizer: Tokenizer | None = None


def _init_worker(model_proto: bytes, settings: dict) -> None:
    """Build the worker's own one-thread tokenizer from the model bytes (nothing on disk):
    the workers are the parallelism, so sentencepiece threads would only compete with them.

    ``gc.freeze()`` first: the objects inherited from the parent (torch and all) then stay out
    of the worker's collections, which would otherwise write to their headers and so copy
    their pages from the parent."""
    global _worker_tokenizer
    gc.freeze()
    _worker_tokenizer = Tokenizer(model_proto, num_threads=1, **settings)


def _encode_in_worker(columns: tuple[pa.Array, pa.Array]) -> tuple[TokenBatch, TokenBatch]:
    """Encode one batch in a worker. Each side in its own call: one thread gains nothing from a
    single call, and holding one side's Python id lists at a time lowers the worker's peak
    memory. Ids come back as int32, what the HDF5 stores: half the bytes to send of the
    tokenizer's int64."""
    assert _worker_tokenizer is not None, "_init_worker did not run"
    src, tgt = columns
    return _encode_compact(_worker_tokenizer, src), _encode_compact(_worker_tokenizer, tgt)


def _encode_compact(tokenizer: Tokenizer, column: pa.Array) -> TokenBatch:
    batch = tokenizer.encode(column.to_pylist())
    return TokenBatch(batch.ids.astype(np.int32), batch.offsets)


def _tokenizer_settings(tokenizer: Tokenizer) -> dict:
    """What a worker needs, besides the model bytes, to encode exactly like ``tokenizer``."""
    return dict(
        lowercase=tokenizer.lowercase,
        pretokenizer=tokenizer.pretokenizer_name,
        max_length=tokenizer.max_length,
    )


PairSource = str | Path | Iterable[pa.RecordBatch]


def pair_batches(pairs: PairSource, batch_size: int) -> Iterator[pa.RecordBatch]:
    """Record batches of at most ``batch_size`` rows, in order, of a pair file (a path) or of a
    stream of record batches (larger ones are sliced, zero-copy)."""
    if isinstance(pairs, str | Path):
        yield from iter_pair_batches(pairs, batch_size)
        return
    for batch in pairs:
        for start in range(0, batch.num_rows, batch_size):
            yield batch.slice(start, batch_size)


def _encoded_with_batches(
    pairs: PairSource, tokenizer: Tokenizer, batch_size: int, workers: int
) -> Iterator[tuple[pa.RecordBatch, tuple[TokenBatch, TokenBatch]]]:
    """``(record batch, (source, target) token batches)`` of the pairs, in their order.

    ``workers <= 1``: in this process, with ``tokenizer.num_threads`` sentencepiece threads.
    Otherwise ``workers`` processes, at most ``2 * workers`` batches in flight.
    """
    batches = pair_batches(pairs, batch_size)
    if workers <= 1:
        for batch in batches:
            yield batch, encode_columns(tokenizer, *pair_columns(batch))
        return
    yield from ordered_map(
        _encode_in_worker,
        batches,
        payload=pair_columns,
        workers=workers,
        initializer=_init_worker,
        initargs=(tokenizer.model_proto, _tokenizer_settings(tokenizer)),
    )


def without_empty_pairs(
    source: TokenBatch, target: TokenBatch, report: StageReport, group: np.ndarray | None = None
) -> tuple[TokenBatch, TokenBatch, np.ndarray | None]:
    """Drop the pairs with a side that encoded to no ids (counted as ``empty_after_encoding``):
    an empty sentence has no embedding to train on. ``group`` (each pair's group) follows."""
    keep = (source.lengths > 0) & (target.lengths > 0)
    n_kept = int(keep.sum())
    if n_kept == len(source):
        return source, target, group
    report.drop(EMPTY_AFTER_ENCODING, len(source) - n_kept)
    rows = np.flatnonzero(keep)
    return source.take(rows), target.take(rows), None if group is None else group[rows]


def _group_indices(batch: pa.RecordBatch, groups: Sequence[str]) -> np.ndarray:
    """Each row's index in ``groups`` from its ``lang`` column (an unknown one is an error)."""
    codes = pc.index_in(batch.column("lang"), value_set=pa.array(list(groups)))
    if codes.null_count:
        unknown = set(batch.column("lang").filter(codes.is_null()).to_pylist())
        raise ValueError(f"pairs of languages {sorted(unknown)} outside the groups {list(groups)}")
    return codes.to_numpy(zero_copy_only=False).astype(np.int64)


def _pair_count(pairs: PairSource) -> int | None:
    """The number of pairs of a pair file; None for a stream of batches (unknown ahead)."""
    return pair_file_info(pairs)[0] if isinstance(pairs, str | Path) else None


def encode_and_pack(
    input: PairSource,
    tokenizer: Tokenizer,
    output: str | Path,
    *,
    lang: str,
    kind: str,
    seed: int,
    batch_size: int = DEFAULT_ENCODE_BATCH,
    workers: int = 1,
    total: int | None = None,
    groups: Sequence[str] = (),
    group_kinds: Sequence[str] = (),
    description: dict | None = None,
) -> StageReport:
    """Encode both sides of the (already shuffled) pairs ``input`` and write the training HDF5.

    Args:
        input: a pair file, or a stream of its record batches (the shuffle's,
            :func:`ops.pairs.shuffle.shuffled_batches`), in the order training should read it.
        tokenizer: the shared sentencepiece tokenizer (see the module note on ``pretokenizer``).
        output: the training HDF5, written atomically; attrs ``n_pairs``, ``vocab_size``,
            ``spm_sha256``, ``lang``, ``kind``, ``seed``, ``format_version``.
        lang: the partition's language code, recorded in the attrs.
        kind: ``"bitext"`` or ``"paraphrase"``.
        seed: the seed the pairs were shuffled with, recorded in the attrs.
        batch_size: pairs encoded per sentencepiece call (memory is a few batches per worker).
        workers: processes encoding batches, each with a one-thread tokenizer; ``<= 1``: this
            process, with ``tokenizer.num_threads`` threads. The file is the same either way.
        total: the number of pairs, for the progress lines' share and time left (read from
            the file when ``input`` is a path).
        groups, group_kinds: a file of several languages (the multilingual model): the pairs'
            ``lang`` column names each pair's group among ``groups``, kept in the file with
            each group's kind (its negative-mining rule).
        description: JSON-able facts about the data kept in the file's attrs (and so in the
            bundle's training summary), e.g. the multilingual model's sampling.
    """
    report = StageReport("encode_and_pack")
    progress = Progress("encode and pack", total if total is not None else _pair_count(input))
    # closing(): if writing fails, the workers stop now rather than when the generator is
    # garbage-collected
    batches = closing(_encoded_with_batches(input, tokenizer, batch_size, workers))
    writer = training_file_writer(
        output,
        tokenizer,
        lang=lang,
        kind=kind,
        seed=seed,
        groups=groups,
        group_kinds=group_kinds,
        description=description,
    )
    with writer, batches as encoded:
        for batch, (source, target) in encoded:
            report.n_in += len(source)
            progress.update(len(source))
            group = _group_indices(batch, groups) if groups else None
            source, target, group = without_empty_pairs(source, target, report, group)
            if len(source):
                writer.append(source, target, group)
        report.n_out = writer.n_pairs
    log.info("packed %d pairs into %s", report.n_out, output)
    return report.finish()
