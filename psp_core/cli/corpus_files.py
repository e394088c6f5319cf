"""Corpora as people keep them, streamed: one sentence per line, JSON Lines with a named field, or a
Parquet column (the vectors go out through :mod:`psp_core.cli.vector_writers`).

Every reader counts its records first (an ``.npy`` header and a progress bar need the count) and
then yields them in batches, so memory stays bounded by one batch whatever the corpus size. Bad
records are clear errors that name the file, the line or row, and the field: a vector is never
silently dropped or shifted, since rows are matched to inputs by position.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

INPUT_FORMATS = ("text", "jsonl", "parquet")
_SUFFIX_FORMATS = {".jsonl": "jsonl", ".ndjson": "jsonl", ".parquet": "parquet", ".pq": "parquet"}
#: the field (JSON Lines) or column (Parquet) that holds the text when none is named
DEFAULT_TEXT_FIELD = "text"


class CorpusError(ValueError):
    """Input that cannot be read as the corpus it claims to be (printed with exit code 2)."""


def guess_input_format(path: str | Path) -> str:
    """``jsonl`` for ``.jsonl``/``.ndjson``, ``parquet`` for ``.parquet``/``.pq``, else ``text``."""
    return _SUFFIX_FORMATS.get(Path(path).suffix.lower(), "text")


@dataclass
class Batch:
    texts: list[str]
    #: the id field's values (an Arrow array from Parquet); ``None`` where no id field was named
    ids: list | pa.Array | None


@dataclass
class Corpus:
    """A corpus file: ``name`` is what errors call it (a path, or ``standard input``)."""

    path: Path
    format: str
    name: str
    field: str = DEFAULT_TEXT_FIELD
    id_field: str | None = None

    def __post_init__(self) -> None:
        if self.format not in INPUT_FORMATS:
            raise CorpusError(f"unknown input format {self.format!r}; one of {INPUT_FORMATS}")
        if self.format == "text" and self.id_field is not None:
            raise CorpusError("an id field needs a JSON Lines or Parquet input")
        if self.format == "parquet":
            self._check_parquet_columns()

    def count(self) -> int:
        """The number of records (one pass over a text or JSON Lines file; Parquet's footer)."""
        if self.format == "parquet":
            return pq.ParquetFile(self.path).metadata.num_rows
        if self.format == "text":
            return count_lines(self.path)
        return sum(1 for _ in self._json_lines())

    def batches(self, size: int) -> Iterator[Batch]:
        """The records in order, ``size`` at a time (the last batch may be shorter)."""
        if self.format == "parquet":
            yield from self._parquet_batches(size)
            return
        if self.format == "text":
            yield from self._text_batches(size)
            return
        texts: list[str] = []
        ids: list | None = None if self.id_field is None else []
        for text, record_id in self._json_records():
            texts.append(text)
            if ids is not None:
                ids.append(record_id)
            if len(texts) == size:
                yield Batch(texts, ids)
                texts, ids = [], None if ids is None else []
        if texts:
            yield Batch(texts, ids)

    def locate(self, index: int) -> str:
        """Where the ``index``-th record (0-based, the position of its vector) is, for a message:
        ``NAME:LINE`` for text and JSON Lines (blank lines counted, so the line an editor
        shows), ``NAME: row N`` for Parquet. A JSON Lines file is read again up to the record:
        this runs for an error message, never per record."""
        if self.format == "parquet":
            return f"{self.name}: row {index}"
        if self.format == "text":
            return f"{self.name}:{index + 1}"
        for position, (number, _) in enumerate(self._json_lines()):
            if position == index:
                return f"{self.name}:{number}"
        return f"{self.name}: record {index + 1}"

    def _text_batches(self, size: int) -> Iterator[Batch]:
        texts: list[str] = []
        for _, lines in read_line_blocks(self.path, self.name):
            texts += lines
            while len(texts) >= size:
                yield Batch(texts[:size], None)
                del texts[:size]
        if texts:
            yield Batch(texts, None)

    # JSON Lines ---------------------------------------------------------------------------------

    def _json_lines(self) -> Iterator[tuple[int, str]]:
        """Non-blank lines: a blank line is not a record (editors leave them at the end)."""
        for number, text in read_lines(self.path, self.name):
            if text.strip():
                yield number, text

    def _json_records(self) -> Iterator[tuple[str, object]]:
        for number, line in self._json_lines():
            try:
                record = json.loads(line)
            except json.JSONDecodeError as error:
                raise CorpusError(f"{self.name}:{number}: not JSON ({error.msg})") from error
            if not isinstance(record, dict):
                raise CorpusError(
                    f"{self.name}:{number}: a JSON {type(record).__name__}, expected an object "
                    f'with a "{self.field}" field'
                )
            yield self._text_of(record, number), self._id_of(record, number)

    def _text_of(self, record: dict, number: int) -> str:
        if self.field not in record:
            raise CorpusError(
                f'{self.name}:{number}: no "{self.field}" field (fields: '
                f"{', '.join(sorted(record)) or 'none'}); name the text field with --field"
            )
        text = record[self.field]
        if not isinstance(text, str):
            raise CorpusError(
                f'{self.name}:{number}: field "{self.field}" is {_json_type(text)}, expected a '
                "string"
            )
        return text

    def _id_of(self, record: dict, number: int):
        if self.id_field is None:
            return None
        if self.id_field not in record:
            raise CorpusError(f'{self.name}:{number}: no "{self.id_field}" id field')
        return record[self.id_field]

    # Parquet ------------------------------------------------------------------------------------

    def _check_parquet_columns(self) -> None:
        try:
            schema = pq.ParquetFile(self.path).schema_arrow
        except (pa.ArrowInvalid, OSError) as error:
            raise CorpusError(f"{self.name}: not a Parquet file ({error})") from error
        wanted = [self.field] + ([self.id_field] if self.id_field else [])
        for column in wanted:
            if column not in schema.names:
                raise CorpusError(
                    f'{self.name}: no "{column}" column (columns: {", ".join(schema.names)}); '
                    "name it with --field or --id-field"
                )
        kind = schema.field(self.field).type
        if not (pa.types.is_string(kind) or pa.types.is_large_string(kind)):
            raise CorpusError(
                f'{self.name}: column "{self.field}" holds {kind}, expected strings; name the '
                "text column with --field"
            )

    def _parquet_batches(self, size: int) -> Iterator[Batch]:
        columns = [self.field] + ([self.id_field] if self.id_field else [])
        first_row = 0
        # pre_buffer off: with it, pyarrow keeps every column chunk read so far until the file
        # is closed (its memory grows with the rows read; benchmarks/RESULTS.md#embed-cli)
        parquet = pq.ParquetFile(self.path, pre_buffer=False)
        for record_batch in parquet.iter_batches(size, columns=columns):
            texts = record_batch.column(0)
            if texts.null_count:
                row = first_row + int(np.flatnonzero(texts.is_null().to_numpy(False))[0])
                raise CorpusError(f'{self.name}: row {row} of column "{self.field}" is null')
            ids = record_batch.column(1) if self.id_field else None  # keeps its Arrow type
            yield Batch(texts.to_pylist(), ids)
            first_row += len(record_batch)


def _json_type(value) -> str:
    if value is None:
        return "null"
    return {bool: "a boolean", int: "a number", float: "a number", list: "an array"}.get(
        type(value), "an object"
    )


#: bytes read at a time: lines are decoded and split a block at a time, not one by one
LINE_BLOCK_BYTES = 1 << 20


def count_lines(path: Path) -> int:
    """The number of lines :func:`read_lines` yields (a last line without a newline counts)."""
    count, last = 0, b"\n"
    with open(path, "rb") as handle:
        while block := handle.read(LINE_BLOCK_BYTES):
            count += block.count(b"\n")
            last = block[-1:]
    return count + (last != b"\n")


def read_line_blocks(
    path: Path, name: str | None = None, block_bytes: int = LINE_BLOCK_BYTES
) -> Iterator[tuple[int, list[str]]]:
    """Yield ``(number of the first line, lines)`` a block of about ``block_bytes`` at a time,
    each line without its newline (``\\n``, and any ``\\r`` before it); invalid UTF-8 is a
    CorpusError naming ``name`` (default: the path) and the line."""
    number, pending = 1, []  # pending: the pieces of a line not ended yet
    with open(path, "rb") as handle:
        while block := handle.read(block_bytes):
            end = block.rfind(b"\n")
            if end < 0:
                pending.append(block)
                continue
            whole = b"".join([*pending, block[:end]])
            pending = [block[end + 1 :]]
            lines = _decoded_lines(whole, number, name or path)
            yield number, lines
            number += len(lines)
    if rest := b"".join(pending):
        yield number, _decoded_lines(rest, number, name or path)


def _decoded_lines(block: bytes, number: int, where) -> list[str]:
    """``block`` (lines joined by ``\\n``, no newline at its end) as lines of text."""
    try:
        text = block.decode("utf-8")
    except UnicodeDecodeError as error:
        bad = number + block.count(b"\n", 0, error.start)
        raise CorpusError(f"{where}:{bad}: not valid UTF-8 ({error.reason})") from error
    lines = text.split("\n")
    if "\r" in text:
        lines = [line.rstrip("\r") for line in lines]
    return lines


def read_lines(path: Path, name: str | None = None) -> Iterator[tuple[int, str]]:
    """Yield ``(line_number, text)`` without the newline; invalid UTF-8 is a CorpusError naming
    ``name`` (default: the path) and the line."""
    for number, lines in read_line_blocks(path, name):
        yield from enumerate(lines, number)
