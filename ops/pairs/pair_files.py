"""Pair files: the intermediate format between corpus stages (Parquet, streamed in batches).

A pair file is a Parquet file with two string columns, ``src`` and ``tgt`` (for bitext ``src``
is always the English side, whatever order OPUS names the pair in; for paraphrase data ``src``
is the reference and ``tgt`` the paraphrase), an optional float32 ``score`` column (ParaNMT's
paraphrase score) and an optional string ``corpus`` column (which OPUS corpus a pair came from,
carried by the filters up to the per-corpus caps, see :mod:`ops.pairs.corpus_caps`). The schema's metadata
records ``src_lang`` and ``tgt_lang``.

Writers append record batches and rename a temporary file into place only when closed without
error; readers stream fixed-size record batches, so no stage holds a corpus in memory.

Example::

    with PairWriter(path, src_lang="en", tgt_lang="de") as writer:
        writer.write(["a house"], ["ein Haus"])
    for src, tgt, score in iter_pair_chunks(path):
        ...
"""

from __future__ import annotations

import os
import queue
import threading
from collections.abc import Iterator, Sequence
from pathlib import Path
from types import TracebackType

import pyarrow as pa
import pyarrow.parquet as pq

DEFAULT_BATCH = 65_536
ROW_GROUP = 131_072  # rows per Parquet row group, at most
_READ_BUFFER = 1 << 20
# Sentences rarely repeat, so a dictionary page is built and then abandoned for each column
# chunk, and min/max statistics of text are never used to skip anything: both off saves
# writing CPU, and the files come out slightly smaller.
PARQUET_OPTIONS = dict(compression="zstd", use_dictionary=False, write_statistics=False)


def _open(path: str | Path) -> pq.ParquetFile:
    """Open for streaming. ``pre_buffer=False``: pyarrow's default pre-buffering keeps every
    range it has read cached for the life of the reader, so reading a file grows RSS by the
    file's size; buffered reads keep it at one row group."""
    return pq.ParquetFile(path, pre_buffer=False, buffer_size=_READ_BUFFER)


CORPUS = "corpus"


def pair_schema(
    src_lang: str,
    tgt_lang: str,
    *,
    with_score: bool,
    with_corpus: bool = False,
    extra_fields: Sequence[pa.Field] = (),
) -> pa.Schema:
    fields = [pa.field("src", pa.string()), pa.field("tgt", pa.string())]
    if with_score:
        fields.append(pa.field("score", pa.float32()))
    if with_corpus:
        fields.append(pa.field(CORPUS, pa.string()))
    fields.extend(extra_fields)
    return pa.schema(fields, metadata={"src_lang": src_lang, "tgt_lang": tgt_lang})


def has_corpus_column(path: str | Path) -> bool:
    """Whether the pair file records each pair's corpus."""
    return CORPUS in _open(path).schema_arrow.names


class PairWriter:
    """Write a pair file batch by batch; atomic (temporary name, renamed on success).

    With ``background=True`` the Parquet encoding and compression of each batch run on a
    thread (they release the GIL) while the caller computes the next batch; at most two
    batches wait. An error on that thread is raised by the next ``write_batch`` or on leaving
    the ``with`` block, and the file is then not renamed into place.
    """

    def __init__(
        self,
        path: str | Path,
        *,
        src_lang: str,
        tgt_lang: str,
        with_score: bool = False,
        with_corpus: bool = False,
        background: bool = False,
        extra_fields: Sequence[pa.Field] = (),
    ) -> None:
        self.path = Path(path)
        self.schema = pair_schema(
            src_lang,
            tgt_lang,
            with_score=with_score,
            with_corpus=with_corpus,
            extra_fields=extra_fields,
        )
        self.with_score = with_score
        self.with_corpus = with_corpus
        self.n_pairs = 0
        self._tmp = self.path.with_name(f".{self.path.name}.tmp-{os.getpid()}")
        self._writer: pq.ParquetWriter | None = None
        self._background = background
        self._pending: queue.Queue[pa.Table | None] | None = None
        self._thread: threading.Thread | None = None
        self._failures: list[BaseException] = []

    @classmethod
    def like(
        cls,
        input: str | Path,
        output: str | Path,
        *,
        background: bool = True,
        other_columns: bool = False,
    ) -> PairWriter:
        """A writer of ``output`` with the languages and columns of the pair file ``input``
        (what a stage that drops or rewrites rows of ``input`` writes); with ``other_columns``
        also the columns this module does not know (the multilingual pairs' ``lang``)."""
        _, src_lang, tgt_lang, has_score = pair_file_info(input)
        known = {"src", "tgt", "score", CORPUS}
        extra = [f for f in pq.read_schema(input) if f.name not in known] if other_columns else []
        return cls(
            output,
            src_lang=src_lang,
            tgt_lang=tgt_lang,
            with_score=has_score,
            with_corpus=has_corpus_column(input),
            background=background,
            extra_fields=extra,
        )

    def __enter__(self) -> PairWriter:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        options = PARQUET_OPTIONS
        if self.with_corpus:  # a few names repeated on every row: a dictionary stores them once
            options = {**PARQUET_OPTIONS, "use_dictionary": [CORPUS]}
        self._writer = pq.ParquetWriter(self._tmp, self.schema, **options)
        if self._background:
            self._pending = queue.Queue(2)
            self._thread = threading.Thread(
                target=self._write_pending, name=f"pair-writer:{self.path.name}", daemon=True
            )
            self._thread.start()
        return self

    def write(
        self,
        src: Sequence[str],
        tgt: Sequence[str],
        score: Sequence[float] | None = None,
        corpus: str | None = None,
    ) -> None:
        """Append pairs (with their scores, and the name of the corpus they all come from)."""
        if len(src) != len(tgt):
            raise ValueError(f"{self.path}: {len(src)} source lines but {len(tgt)} target lines")
        if (score is not None) != self.with_score:
            raise ValueError(
                f"{self.path}: the file was opened with_score={self.with_score}, "
                f"but write() got score={'a column' if score is not None else 'None'}"
            )
        if (corpus is not None) != self.with_corpus:
            raise ValueError(
                f"{self.path}: the file was opened with_corpus={self.with_corpus}, "
                f"but write() got corpus={corpus!r}"
            )
        if not len(src):
            return
        columns = [pa.array(src, pa.string()), pa.array(tgt, pa.string())]
        if score is not None:
            columns.append(pa.array(score, pa.float32()))
        if corpus is not None:
            columns.append(pa.repeat(pa.scalar(corpus, pa.string()), len(src)))
        self.write_batch(pa.RecordBatch.from_arrays(columns, schema=self.schema))

    def write_batch(self, batch: pa.RecordBatch | pa.Table) -> None:
        """Append an Arrow batch or table that has this file's columns."""
        assert self._writer is not None, "use PairWriter as a context manager"
        if self._failures:
            raise self._failures[0]
        if batch.num_rows:
            table = pa.Table.from_batches([batch]) if isinstance(batch, pa.RecordBatch) else batch
            if self._pending is None:
                self._write_table(table)
            else:
                self._pending.put(table)
            self.n_pairs += batch.num_rows

    def _write_table(self, table: pa.Table) -> None:
        assert self._writer is not None
        self._writer.write_table(table.cast(self.schema), row_group_size=ROW_GROUP)

    def _write_pending(self) -> None:
        """The background thread: write queued tables in order until the ``None`` sentinel."""
        assert self._pending is not None
        while (table := self._pending.get()) is not None:
            if self._failures:
                continue  # keep taking, so the caller never blocks on a full queue
            try:
                self._write_table(table)
            except BaseException as error:  # noqa: BLE001 - raised again in the caller's thread
                self._failures.append(error)

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        assert self._writer is not None
        try:
            if self._thread is not None:
                assert self._pending is not None
                self._pending.put(None)
                self._thread.join()
            self._writer.close()
            if self._failures and exc_type is None:
                raise self._failures[0]
            if exc_type is None:
                os.replace(self._tmp, self.path)
        finally:
            self._tmp.unlink(missing_ok=True)


def pair_file_info(path: str | Path) -> tuple[int, str, str, bool]:
    """``(n_pairs, src_lang, tgt_lang, has_score)`` from the footer, without reading the data."""
    parquet = _open(path)
    metadata = parquet.schema_arrow.metadata or {}
    return (
        parquet.metadata.num_rows,
        metadata.get(b"src_lang", b"").decode(),
        metadata.get(b"tgt_lang", b"").decode(),
        "score" in parquet.schema_arrow.names,
    )


def pair_columns(batch: pa.RecordBatch) -> tuple[pa.Array, pa.Array]:
    """A batch's ``(src, tgt)`` text columns: what the worker-process stages send a worker
    (Arrow arrays pickle as their buffers, no Python string per line)."""
    return batch.column("src"), batch.column("tgt")


def iter_pair_batches(
    path: str | Path, batch_size: int = DEFAULT_BATCH, *, columns: list[str] | None = None
) -> Iterator[pa.RecordBatch]:
    """Stream a pair file as Arrow record batches of at most ``batch_size`` rows (of only
    ``columns`` when given: the others are not even decompressed)."""
    parquet = _open(path)
    yield from parquet.iter_batches(batch_size=batch_size, columns=columns)


def iter_pair_chunks(
    path: str | Path, batch_size: int = DEFAULT_BATCH
) -> Iterator[tuple[list[str], list[str], list[float] | None]]:
    """Stream ``(src, tgt, score or None)`` as Python lists, ``batch_size`` rows at a time."""
    for batch in iter_pair_batches(path, batch_size):
        score = batch.column("score").to_pylist() if "score" in batch.schema.names else None
        yield batch.column("src").to_pylist(), batch.column("tgt").to_pylist(), score


def iter_pairs(path: str | Path, batch_size: int = DEFAULT_BATCH) -> Iterator[tuple[str, str]]:
    """Stream ``(src, tgt)`` tuples."""
    for src, tgt, _ in iter_pair_chunks(path, batch_size):
        yield from zip(src, tgt, strict=True)
