"""Corpora as people keep them, streamed: one sentence per line, JSON Lines with a named field, or a
Parquet column (the vectors go out through :mod:`psp_core.cli.vector_writers`).

Every reader counts its records first (an ``.npy`` header and a progress bar need the count) and
then yields them in batches, so memory stays bounded by one batch whatever the corpus size. Bad
records are clear errors that name the file, the line or row, and the field: a vector is never
silently dropped or shifted, since rows are matched to inputs by position.
"""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from psp_core.tokenization.tokenizer import MAX_SENTENCE_CHARS

INPUT_FORMATS = ("text", "jsonl", "parquet")
#: half of a UTF-16 surrogate pair alone (JSON's \ud800 escapes): not a character
_SURROGATE = re.compile("[\ud800-\udfff]")
_SUFFIX_FORMATS = {".jsonl": "jsonl", ".ndjson": "jsonl", ".parquet": "parquet", ".pq": "parquet"}
#: the field (JSON Lines) or column (Parquet) that holds the text when none is named
DEFAULT_TEXT_FIELD = "text"
#: characters of a record that are embedded; a longer one is cut to them and counted (the
#: library's own limit: one record never holds much memory; docs/cli.md)
DEFAULT_MAX_CHARS = MAX_SENTENCE_CHARS
#: characters a batch of records holds at most (fewer records than asked where they are long),
#: so that a batch's memory, tokenized, stays bounded whatever the lines' lengths
BATCH_CHARS = 1 << 23


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
    #: a record's text beyond this many characters is cut (counted in :attr:`truncations`)
    max_chars: int = DEFAULT_MAX_CHARS

    def __post_init__(self) -> None:
        if self.max_chars < 1:
            raise CorpusError(f"the character limit must be positive, got {self.max_chars}")
        self.truncations = Truncations(self.max_chars)
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
        """The records in order, ``size`` at a time, or fewer where they reach
        :data:`BATCH_CHARS` characters (the last batch may be shorter)."""
        if self.format == "parquet":
            yield from self._parquet_batches(size)
            return
        if self.format == "text":
            yield from self._text_batches(size)
            return
        texts: list[str] = []
        ids: list | None = None if self.id_field is None else []
        chars = 0
        for text, record_id in self._json_records():
            if texts and chars + len(text) > BATCH_CHARS:
                yield Batch(texts, ids)
                texts, ids, chars = [], None if ids is None else [], 0
            texts.append(text)
            chars += len(text)
            if ids is not None:
                ids.append(record_id)
            if len(texts) == size:
                yield Batch(texts, ids)
                texts, ids, chars = [], None if ids is None else [], 0
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
        chars = 0
        blocks = read_line_blocks(
            self.path, self.name, max_chars=self.max_chars, on_cut=self._cut_at_line
        )
        for _, lines in blocks:
            block_chars = sum(map(len, lines))
            if chars + block_chars > BATCH_CHARS:  # long lines: batches cut line by line
                for line in lines:
                    if texts and chars + len(line) > BATCH_CHARS:
                        yield Batch(texts, None)
                        texts, chars = [], 0
                    texts.append(line)
                    chars += len(line)
                    if len(texts) == size:
                        yield Batch(texts, None)
                        texts, chars = [], 0
                continue
            texts += lines
            chars += block_chars
            while len(texts) >= size:
                yield Batch(texts[:size], None)
                del texts[:size]
                chars = sum(map(len, texts))
        if texts:
            yield Batch(texts, None)

    def _cut_at_line(self, number: int) -> None:
        self.truncations.add(f"{self.name}:{number}")

    # JSON Lines ---------------------------------------------------------------------------------

    def _json_lines(self) -> Iterator[tuple[int, str]]:
        """Non-blank lines: a blank line is not a record (editors leave them at the end). A line
        too long to hold a text of ``max_chars`` characters and its other fields is refused
        (a cut line is no longer JSON), never held whole."""
        limit = json_line_chars(self.max_chars)

        def refuse(number: int) -> None:
            raise CorpusError(
                f"{self.name}:{number}: a JSON Lines line longer than {limit:,} characters, "
                f"more than a text of --max-chars {self.max_chars:,} needs; raise --max-chars "
                "to read it"
            )

        for number, text in read_lines(self.path, self.name, max_chars=limit, on_cut=refuse):
            if text.strip():
                yield number, text

    def _json_records(self) -> Iterator[tuple[str, object]]:
        for number, line in self._json_lines():
            try:
                record = json.loads(line)
            except json.JSONDecodeError as error:
                raise CorpusError(f"{self.name}:{number}: not JSON ({error.msg})") from error
            except RecursionError:
                raise CorpusError(
                    f"{self.name}:{number}: JSON nested deeper than {sys.getrecursionlimit():,} "
                    "levels, more than Python reads; a record is an object whose text field is "
                    "a string"
                ) from None
            if not isinstance(record, dict):
                raise CorpusError(
                    f"{self.name}:{number}: a JSON {type(record).__name__}, expected an object "
                    f'with a "{self.field}" field'
                )
            text = self._text_of(record, number)
            lone = "\\u" in line and _SURROGATE.search(text)  # (only an escape makes one)
            if lone:
                raise CorpusError(
                    f'{self.name}:{number}: field "{self.field}" holds a lone surrogate '
                    f"(\\u{ord(lone.group()):04x} at character {lone.start()}), which is not "
                    "text: an escape of half a UTF-16 pair; fix or drop the record"
                )
            yield text, self._id_of(record, number)

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
        if len(text) > self.max_chars:
            self._cut_at_line(number)
            return text[: self.max_chars]
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
        if pa.types.is_dictionary(kind):  # (pandas' category columns): read as their strings
            kind = kind.value_type
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
            if pa.types.is_dictionary(texts.type):
                texts = texts.dictionary_decode()
            if texts.null_count:
                row = first_row + int(np.flatnonzero(texts.is_null().to_numpy(False))[0])
                raise CorpusError(f'{self.name}: row {row} of column "{self.field}" is null')
            ids = record_batch.column(1) if self.id_field else None  # keeps its Arrow type
            yield Batch(self._cut_column(texts, first_row), ids)
            first_row += len(record_batch)

    def _cut_column(self, texts: pa.Array, first_row: int) -> list[str]:
        """The column's strings, those over ``max_chars`` characters cut and counted."""
        lengths = pc.utf8_length(texts)
        longer = pc.greater(lengths, self.max_chars)
        count = pc.sum(longer).as_py() or 0
        if count:
            row = first_row + int(np.flatnonzero(longer.to_numpy(False))[0])
            self.truncations.add(f"{self.name}: row {row}", count)
            texts = pc.utf8_slice_codeunits(texts, 0, self.max_chars)
        return texts.to_pylist()


def json_line_chars(max_chars: int) -> int:
    """The longest JSON Lines line read for texts of ``max_chars`` characters: room for the
    text written with JSON's longest escapes (12 characters: a surrogate pair written as two
    ``\\u`` escapes of 4 hex digits) and 64 Ki characters of other fields."""
    return 12 * max_chars + (1 << 16)


def _json_type(value) -> str:
    if value is None:
        return "null"
    return {bool: "a boolean", int: "a number", float: "a number", list: "an array"}.get(
        type(value), "an object"
    )


#: bytes read at a time: lines are decoded and split a block at a time, not one by one
LINE_BLOCK_BYTES = 1 << 20
#: the most bytes a line of ``max_chars`` characters can take in UTF-8
_BYTES_PER_CHAR = 4


@dataclass
class Truncations:
    """Records cut to ``max_chars`` characters: how many, and where the first one is."""

    max_chars: int
    count: int = 0
    first: str | None = None

    def add(self, where: str, count: int = 1) -> None:
        if self.first is None:
            self.first = where
        self.count += count

    def summary(self) -> str:
        """``""`` when nothing was cut, else a sentence for the command's summary line."""
        if not self.count:
            return ""
        records = "record was" if self.count == 1 else "records were"
        return (
            f"{self.count:,} {records} longer than {self.max_chars:,} characters and cut to "
            f"them (--max-chars; the first at {self.first})"
        )


def count_lines(path: Path) -> int:
    """The number of lines :func:`read_lines` yields (a last line without a newline counts)."""
    count, last = 0, b"\n"
    with open(path, "rb") as handle:
        while block := handle.read(LINE_BLOCK_BYTES):
            count += block.count(b"\n")
            last = block[-1:]
    return count + (last != b"\n")


def read_line_blocks(
    path: Path,
    name: str | None = None,
    block_bytes: int = LINE_BLOCK_BYTES,
    max_chars: int | None = None,
    on_cut: Callable[[int], None] | None = None,
) -> Iterator[tuple[int, list[str]]]:
    """Yield ``(number of the first line, lines)`` a block of about ``block_bytes`` at a time,
    each line without its newline (``\\n``, and any ``\\r`` before it); invalid UTF-8 is a
    CorpusError naming ``name`` (default: the path) and the line.

    With ``max_chars``, a longer line is cut to its first ``max_chars`` characters and
    ``on_cut(line number)`` is called: of a line longer than a block, no more than about
    ``4 * max_chars`` bytes are ever held (the rest is read past, neither kept nor decoded), so
    memory stays bounded however long the line."""
    where = name or path
    # (and a few bytes more: a line of exactly ``max_chars`` characters and its ``\r`` is whole)
    limit = None if max_chars is None else _BYTES_PER_CHAR * max_chars + 8
    number, pending = 1, _Pending(limit)  # the pieces of a line not ended yet
    with open(path, "rb") as handle:
        while block := handle.read(block_bytes):
            end = block.rfind(b"\n")
            if end < 0:
                pending.hold(block)
                continue
            if pending.overflowed:  # its first line, too long to hold, is cut apart
                first = block.find(b"\n")
                pending.hold(block[:first])
                lines = [pending.cut_line(number, where)]
                if first < end:
                    lines += _decoded_lines(block[first + 1 : end], number + 1, where)
            else:
                lines = _decoded_lines(pending.joined(block[:end]), number, where)
            pending = _Pending(limit, block[end + 1 :])
            yield number, _cut_lines(lines, number, max_chars, on_cut)
            number += len(lines)
    if pending.overflowed:
        yield number, _cut_lines([pending.cut_line(number, where)], number, max_chars, on_cut)
    elif rest := pending.joined(b""):
        yield number, _cut_lines(_decoded_lines(rest, number, where), number, max_chars, on_cut)


class _Pending:
    """The start of a line not ended yet, held up to ``limit`` bytes (None: all of it)."""

    def __init__(self, limit: int | None, start: bytes = b"") -> None:
        self.limit, self.pieces, self.held, self.overflowed = limit, [start], len(start), False

    def hold(self, piece: bytes) -> None:
        if self.limit is not None and self.held + len(piece) > self.limit:
            piece = piece[: max(self.limit - self.held, 0)]
            self.overflowed = True
        self.pieces.append(piece)
        self.held += len(piece)

    def joined(self, tail: bytes) -> bytes:
        return b"".join([*self.pieces, tail])

    def cut_line(self, number: int, where) -> str:
        """The held start of an overflowed line, decoded up to its last whole character."""
        kept = self.joined(b"")
        start = len(kept) - 1
        while start > 0 and kept[start] & 0xC0 == 0x80:  # a character's continuation bytes
            start -= 1
        if start >= 0 and len(kept) - start < _utf8_length(kept[start]):
            kept = kept[:start]  # its last character, incomplete
        return _decoded_lines(kept, number, where)[0]


def _utf8_length(first_byte: int) -> int:
    """The bytes of the UTF-8 character that starts with ``first_byte``."""
    if first_byte < 0x80:
        return 1
    return 4 if first_byte >= 0xF0 else 3 if first_byte >= 0xE0 else 2


def _cut_lines(lines: list[str], number: int, max_chars: int | None, on_cut) -> list[str]:
    """``lines`` (the first numbered ``number``), those over ``max_chars`` characters cut."""
    if max_chars is None or not lines or max(map(len, lines)) <= max_chars:
        return lines
    for index, line in enumerate(lines):
        if len(line) > max_chars:
            lines[index] = line[:max_chars]
            if on_cut is not None:
                on_cut(number + index)
    return lines


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


def read_lines(
    path: Path,
    name: str | None = None,
    max_chars: int | None = None,
    on_cut: Callable[[int], None] | None = None,
) -> Iterator[tuple[int, str]]:
    """Yield ``(line_number, text)`` without the newline; invalid UTF-8 is a CorpusError naming
    ``name`` (default: the path) and the line; ``max_chars`` and ``on_cut`` as
    :func:`read_line_blocks`."""
    for number, lines in read_line_blocks(path, name, max_chars=max_chars, on_cut=on_cut):
        yield from enumerate(lines, number)
