"""Reading OPUS moses zips: two line-aligned members streamed in lockstep, never extracted.

An OPUS moses zip for the pair ``l1-l2`` (codes sorted alphabetically, e.g. ``de-en``,
``en-zh_cn``) holds ``{Corpus}.{l1}-{l2}.{l1}`` and ``{Corpus}.{l1}-{l2}.{l2}`` plus README,
LICENSE and ``.ids``/``.xml`` files, which are ignored. Both sides are read in blocks of whole
byte lines, split, checked and cleaned a block at a time into Arrow string arrays, and paired
line by line in batches. One bad line is a counted skip rather than a failed corpus: a pair is
skipped as ``empty`` when either side is blank and as ``undecodable`` when either side is not
valid UTF-8. Nothing is ever written from a zip, and a zip whose member names are absolute or
climb out with ``..`` is refused outright.
"""

from __future__ import annotations

import logging
import queue
import re
import threading
import zipfile
from collections import deque
from collections.abc import Iterable, Iterator
from contextlib import ExitStack, suppress
from dataclasses import dataclass
from itertools import compress, islice
from operator import not_
from pathlib import Path, PurePosixPath, PureWindowsPath
from typing import BinaryIO

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ops.stage_report import StageReport

log = logging.getLogger(__name__)

#: Bytes read from each side at a time (cut at the last newline, the rest carried over).
READ_BLOCK = 1 << 20
#: Line pairs per batch handed to callers (about one pair-file write each).
BATCH_PAIRS = 65_536
#: First bytes of the UTF-8 encodings of every character ``str.isspace`` accepts, so of every
#: non-empty blank line (tests check this against all of Unicode).
WHITESPACE_LEAD_BYTES = bytes([*range(0x09, 0x0E), *range(0x1C, 0x21), 0xC2, 0xE1, 0xE2, 0xE3])
_MAY_START_BLANK = np.zeros(256, dtype=bool)
_MAY_START_BLANK[list(WHITESPACE_LEAD_BYTES)] = True
# "\r\r*" rather than "\r+": a leading literal lets the regex engine skip to each "\r"
_CRS_BEFORE_NEWLINE = re.compile(rb"\r\r*\n")
_ESCAPED_BYTE = re.compile("[\udc80-\udcff]")  # what decoding with surrogateescape makes of one


class UnsafeZipError(ValueError):
    """A zip holds a member name that is absolute or leaves its directory."""


def check_member_names(archive: zipfile.ZipFile, zip_path: str | Path) -> None:
    """Refuse a zip with absolute member names or ``..`` components (zip-slip).

    Raises:
        UnsafeZipError: naming the zip and the first offending member.
    """
    for name in archive.namelist():
        posix, windows = PurePosixPath(name), PureWindowsPath(name)
        if (
            posix.is_absolute()
            or windows.is_absolute()
            or windows.drive
            or ".." in posix.parts
            or ".." in windows.parts
        ):
            raise UnsafeZipError(
                f"{zip_path}: refusing a zip with the unsafe member name {name!r} (absolute or "
                f"containing '..'); the file is corrupt or malicious, delete it"
            )


def find_member(
    archive: zipfile.ZipFile, zip_path: str | Path, *, corpus: str, pair: str, lang: str
) -> str:
    """The one member whose name ends in ``.{pair}.{lang}`` (e.g. ``.de-en.de``)."""
    suffix = f".{pair}.{lang}"
    matches = [n for n in archive.namelist() if n.endswith(suffix) and not n.endswith("/")]
    if len(matches) != 1:
        found = "no member" if not matches else f"{len(matches)} members ({', '.join(matches)})"
        raise ValueError(
            f"corpus {corpus!r} for {pair}: {zip_path} has {found} ending in {suffix!r}; "
            f"members are {archive.namelist()[:20]}; expected an OPUS moses zip for {pair}"
        )
    return matches[0]


def clean_line(raw: bytes) -> str | None:
    """Decode one byte line and strip its line ending; ``None`` if it is not UTF-8.

    Carriage returns left inside the line become spaces, so no line break survives in a pair.
    """
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        return None
    text = text.rstrip("\r\n")
    return text.replace("\r", " ") if "\r" in text else text


def aligned_pairs(
    left: Iterable[bytes],
    right: Iterable[bytes],
    report: StageReport,
    *,
    left_name: str,
    right_name: str,
) -> Iterator[tuple[str, str]]:
    """Yield cleaned ``(left, right)`` text pairs from two line-aligned byte-line streams.

    A pair-at-a-time view of :func:`aligned_batches`: the same cleaning, counts and errors.
    Corpus-sized readers should take the batches, which never build a Python string per line.
    """
    for sources, targets in aligned_batches(
        left, right, report, left_name=left_name, right_name=right_name
    ):
        yield from zip(sources.to_pylist(), targets.to_pylist(), strict=True)


def aligned_batches(
    left: Iterable[bytes],
    right: Iterable[bytes],
    report: StageReport,
    *,
    left_name: str,
    right_name: str,
    batch_size: int = BATCH_PAIRS,
    block_size: int = READ_BLOCK,
) -> Iterator[tuple[pa.StringArray, pa.StringArray]]:
    r"""Yield cleaned ``(left_lines, right_lines)`` Arrow string arrays from two aligned streams.

    ``left``/``right`` are binary streams (zip members, gzip or plain files: anything with
    ``read(n)``), read ``block_size`` bytes at a time, or any other iterable of byte lines (one
    item per line). Lines are what iterating a binary file yields (split after ``b"\n"``; a
    last line without one still counts), cleaned as :func:`clean_line` cleans them. A block of
    lines is split, checked and cleaned as a whole, in C (see :func:`_block_lines`), and never
    becomes Python strings: :class:`ops.pairs.pair_files.PairWriter` writes the arrays as they are,
    and ``to_pylist()`` gives strings to whoever wants them.

    Every line pair counts in ``report.n_in``; a pair is skipped (``report.drop``) as
    ``undecodable`` when either side is not UTF-8, else as ``empty`` when either side is blank
    (``str.strip`` semantics). A batch covers up to ``batch_size`` line pairs, so it holds that
    many less the skipped ones; a batch with nothing left is not yielded. ``report.n_out`` is
    left to the caller, who decides what to keep.

    Raises:
        ValueError: the streams have different numbers of lines, naming both and the line
            where the shorter one ends (after every pair before it has been yielded); or a
            line is over 2 GiB (more than one Arrow string array holds).
    """
    with ExitStack() as readers:
        sides = (
            _PendingLines(_line_blocks(left, block_size, readers)),
            _PendingLines(_line_blocks(right, block_size, readers)),
        )
        while True:
            for side in sides:
                side.fill(batch_size)
            count = min(batch_size, sides[0].count, sides[1].count)
            if count:
                sources, targets = _drop_skipped(sides[0].take(count), sides[1].take(count), report)
                if len(sources):
                    yield sources, targets
            elif sides[0].count or sides[1].count:
                shorter, name = (sides[1], right_name) if sides[0].count else (sides[0], left_name)
                raise ValueError(
                    f"{left_name} and {right_name} are not line-aligned: {name} ends after line "
                    f"{shorter.taken} while the other side goes on"
                )
            else:
                return


@dataclass
class _Lines:
    """Consecutive cleaned lines of one side, and which of them are skipped and why.

    Attributes:
        text: the lines; an undecodable line is held as ``""``.
        undecodable: indices (into ``text``) of the lines that are not UTF-8.
        blank: indices of the lines that are empty or whitespace only (``str.strip``).
    """

    text: pa.StringArray
    undecodable: set[int]
    blank: set[int]

    def __len__(self) -> int:
        return len(self.text)

    def split(self, count: int) -> tuple[_Lines, _Lines]:
        """The first ``count`` lines and the rest."""
        head = _Lines(
            self.text.slice(0, count),
            {i for i in self.undecodable if i < count},
            {i for i in self.blank if i < count},
        )
        rest = _Lines(
            self.text.slice(count),
            {i - count for i in self.undecodable if i >= count},
            {i - count for i in self.blank if i >= count},
        )
        return head, rest

    @staticmethod
    def concat(parts: list[_Lines]) -> _Lines:
        """The parts one after the other, in one array."""
        if len(parts) == 1:
            return parts[0]
        undecodable: set[int] = set()
        blank: set[int] = set()
        start = 0
        for part in parts:
            undecodable.update(start + i for i in part.undecodable)
            blank.update(start + i for i in part.blank)
            start += len(part)
        return _Lines(pa.concat_arrays([part.text for part in parts]), undecodable, blank)


class _PendingLines:
    """One side's cleaned lines not yet paired, pulled a block at a time as pairing needs.

    The sides' blocks end at different lines, so each side keeps what it has read past the
    other, and hands out exactly as many lines as the other side does.
    """

    def __init__(self, blocks: Iterator[_Lines]) -> None:
        self._blocks = blocks
        self._done = False
        self._pending: deque[_Lines] = deque()
        self.count = 0  # lines pending
        self.taken = 0  # lines handed out so far

    def fill(self, count: int) -> None:
        """Read blocks until ``count`` lines are pending or the stream is done."""
        while self.count < count and not self._done:
            block = next(self._blocks, None)
            if block is None:
                self._done = True
            else:
                self._pending.append(block)
                self.count += len(block)

    def take(self, count: int) -> _Lines:
        """The next ``count`` lines (at most :attr:`count`)."""
        parts = []
        needed = count
        while needed:
            if len(self._pending[0]) <= needed:
                parts.append(self._pending.popleft())
                needed -= len(parts[-1])
            else:
                head, self._pending[0] = self._pending[0].split(needed)
                parts.append(head)
                needed = 0
        self.count -= count
        self.taken += count
        return _Lines.concat(parts)


def _drop_skipped(
    left: _Lines, right: _Lines, report: StageReport
) -> tuple[pa.StringArray, pa.StringArray]:
    """Count the line pairs, drop those with an undecodable or blank side, return the rest.

    An undecodable side wins over a blank one (it is held as ``""``, so it is blank as well).
    """
    report.n_in += len(left)
    undecodable = left.undecodable | right.undecodable
    skipped = undecodable | left.blank | right.blank
    report.drop("undecodable", len(undecodable))
    report.drop("empty", len(skipped) - len(undecodable))
    if not skipped:
        return left.text, right.text
    keep = np.ones(len(left), dtype=bool)
    keep[list(skipped)] = False
    mask = pa.array(keep)
    return left.text.filter(mask), right.text.filter(mask)


def _line_blocks(source: Iterable[bytes], block_size: int, readers: ExitStack) -> Iterator[_Lines]:
    """Cleaned lines block by block.

    A binary stream is read ahead on a thread (see :class:`_ReadAhead`, closed by ``readers``)
    in chunks of ``block_size``; any other iterable is taken as byte lines, one item per line,
    and cleaned one by one (the contract of :func:`aligned_pairs`).
    """
    if hasattr(source, "read"):
        chunks = readers.enter_context(_ReadAhead(source, block_size))
        yield from map(_block_lines, _whole_line_blocks(chunks))
        return
    items = iter(source)
    while chunk := list(islice(items, BATCH_PAIRS)):
        cleaned = [clean_line(item) for item in chunk]
        texts = [text or "" for text in cleaned]
        undecodable = {index for index, text in enumerate(cleaned) if text is None}
        yield _Lines(pa.array(texts, pa.string()), undecodable, _blank_indices(texts))


class _ReadAhead:
    """A binary stream's ``read(block_size)`` chunks, read on a thread a few chunks ahead.

    Inflating a zip member or a gzip file is the largest cost of reading one, and zlib releases
    the GIL while it works, so both sides inflate beside the splitting and writing done on the
    caller's thread. Iterating gives the chunks in order and re-raises what a read raised (a CRC
    error, a truncated member); :meth:`close` stops and joins the thread, so it never touches
    the stream after the caller has closed it.
    """

    DEPTH = 2  # chunks waiting at most, per stream

    def __init__(self, stream: BinaryIO, block_size: int) -> None:
        self._stream = stream
        self._block_size = block_size
        self._queue: queue.Queue[bytes | BaseException] = queue.Queue(self.DEPTH)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._read_all, name="read-ahead", daemon=True)

    def __enter__(self) -> _ReadAhead:
        self._thread.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def _read_all(self) -> None:
        try:
            while not self._stop.is_set():
                chunk = self._stream.read(self._block_size)
                self._queue.put(chunk)
                if not chunk:
                    return
        except BaseException as error:  # noqa: BLE001 - handed over and raised by the reader
            self._queue.put(error)

    def __iter__(self) -> Iterator[bytes]:
        """The chunks up to the end of the stream (iterate once)."""
        while chunk := self._queue.get():
            if isinstance(chunk, BaseException):
                raise chunk
            yield chunk

    def close(self) -> None:
        """Stop the thread: it ends after at most the read under way, whose chunk is dropped."""
        self._stop.set()
        while self._thread.is_alive():
            with suppress(queue.Empty):
                self._queue.get_nowait()  # unblocks a put() waiting on a full queue
            self._thread.join(timeout=0.01)


def _whole_line_blocks(chunks: Iterable[bytes]) -> Iterator[bytes]:
    r"""The chunks regrouped into blocks of whole lines, each ending in ``b"\n"``.

    Each chunk is cut after its last newline and the rest carried into the next block, so no
    line (nor a multi-byte character) is ever split between blocks. A last line without a
    newline gets one, as it is still a line; an empty stream gives no block at all.
    """
    carry: list[bytes] = []  # a line still going on, possibly over several chunks
    for chunk in chunks:
        cut = chunk.rfind(b"\n") + 1
        if cut:
            yield b"".join([*carry, chunk[:cut]]) if carry else chunk[:cut]
            carry = []
        if cut < len(chunk):
            carry.append(chunk[cut:])
    if carry:
        yield b"".join([*carry, b"\n"])


def _block_lines(block: bytes) -> _Lines:
    r"""The cleaned lines of a block of whole lines, as :func:`clean_line` cleans each line.

    Carriage returns are cleaned on the bytes: ``\r`` is ASCII and never part of a multi-byte
    character, so stripping the run before each newline and turning the others into spaces is
    ``rstrip("\r\n")`` and ``replace("\r", " ")`` of each decoded line, and leaves a line
    exactly as (in)valid UTF-8 as it was. The lines then become one Arrow array over the
    block's own bytes, without a Python string per line; Arrow checks it is UTF-8 (strictly,
    as Python decodes), and only a block that is not is decoded in Python, to find the lines
    to blank out.
    """
    if b"\r" in block:
        block = _CRS_BEFORE_NEWLINE.sub(b"\n", block).replace(b"\r", b" ")
    lines, offsets, text = _split_block(block)
    undecodable: set[int] = set()
    try:
        lines.validate(full=True)
    except pa.ArrowInvalid:
        undecodable = _undecodable_lines(block)
        keep = np.ones(len(lines), dtype=bool)
        keep[list(undecodable)] = False
        lines = pc.if_else(pa.array(keep), lines, "")
        lines.validate(full=True)  # had Python and Arrow disagreed, this fails rather than pass
    return _Lines(lines, undecodable, _blank_lines(lines, offsets, text))


def _split_block(block: bytes) -> tuple[pa.StringArray, np.ndarray, bytes]:
    """The lines of a block as a (not yet validated) Arrow array, its offsets and its bytes.

    The newlines are dropped from the bytes, so line ``i`` ends where its newline was, less
    ``i``; the array is a view of those bytes, with no copy per line.

    Raises:
        ValueError: a line longer than an Arrow string array can hold (2 GiB).
    """
    if len(block) >= 2**31:
        raise ValueError(f"a line of {len(block):,} bytes: no line-aligned text has lines of 2 GiB")
    newlines = np.flatnonzero(np.frombuffer(block, dtype=np.uint8) == ord("\n"))
    text = block.replace(b"\n", b"")
    offsets = np.zeros(len(newlines) + 1, dtype=np.int32)
    offsets[1:] = newlines - np.arange(len(newlines))
    lines = pa.StringArray.from_buffers(len(newlines), pa.py_buffer(offsets), pa.py_buffer(text))
    return lines, offsets, text


def _undecodable_lines(block: bytes) -> set[int]:
    """Indices of the lines of a block of whole lines that are not UTF-8.

    Decoding with ``surrogateescape`` turns each byte that strict decoding rejects into a lone
    surrogate (U+DC80..U+DCFF), which valid UTF-8 never yields, so the lines holding one are
    exactly those ``bytes.decode`` refuses. One pass, however many bad lines there are.
    """
    text = block.decode("utf-8", "surrogateescape")
    bad: set[int] = set()
    line = position = 0
    for match in _ESCAPED_BYTE.finditer(text):
        line += text.count("\n", position, match.start())
        position = match.start()
        bad.add(line)
    return bad


def _blank_lines(lines: pa.StringArray, offsets: np.ndarray, text: bytes) -> set[int]:
    """Indices of the blank lines (``str.strip`` semantics) of a block's array.

    A blank line is empty or starts with a whitespace character, whose first byte is one of
    :data:`WHITESPACE_LEAD_BYTES` (looked up in ``text``, the block's lines end to end, at
    ``offsets``); only those few candidates become Python strings, checked with ``str.strip``.
    """
    starts = offsets[:-1]
    candidates = starts == offsets[1:]
    if text:
        first_bytes = np.frombuffer(text, dtype=np.uint8)[np.minimum(starts, len(text) - 1)]
        candidates |= _MAY_START_BLANK[first_bytes]
    indices = np.flatnonzero(candidates)
    if not len(indices):
        return set()
    texts = lines.take(pa.array(indices)).to_pylist()
    return {index for index, line in zip(indices.tolist(), texts, strict=True) if not line.strip()}


def _blank_indices(lines: list[str]) -> set[int]:
    """Indices of the lines that are empty or whitespace only (``str.strip`` semantics).

    ``str.strip`` returns the line itself unless it has whitespace at an end, so the common
    all-non-blank case costs one C-level pass.
    """
    if all(map(str.strip, lines)):
        return set()
    return set(compress(range(len(lines)), map(not_, map(str.strip, lines))))


def read_moses_zip_batches(
    zip_path: str | Path,
    *,
    corpus: str,
    src_lang: str,
    tgt_lang: str,
    report: StageReport,
    batch_size: int = BATCH_PAIRS,
) -> Iterator[tuple[pa.StringArray, pa.StringArray]]:
    """Stream ``(src_lines, tgt_lines)`` Arrow batches from an OPUS moses zip, in your order.

    ``src_lang``/``tgt_lang`` are the codes as OPUS spells them (``en``, ``zh_cn``); the zip's
    pair name is the two sorted alphabetically, and the sides are swapped as needed so the first
    array of each batch is always ``src_lang``. Skips are counted in ``report`` (see
    :func:`aligned_batches`, also for ``batch_size``).

    Raises:
        UnsafeZipError: a member name is absolute or contains ``..``.
        ValueError: a side is missing or ambiguous, or the sides differ in length.
        zipfile.BadZipFile: the zip is corrupt (e.g. a CRC mismatch found while reading).
    """
    zip_path = Path(zip_path)
    pair = "-".join(sorted((src_lang, tgt_lang)))
    with zipfile.ZipFile(zip_path) as archive:
        check_member_names(archive, zip_path)
        src_member = find_member(archive, zip_path, corpus=corpus, pair=pair, lang=src_lang)
        tgt_member = find_member(archive, zip_path, corpus=corpus, pair=pair, lang=tgt_lang)
        log.info("reading %s: %s + %s", zip_path, src_member, tgt_member)
        with archive.open(src_member) as src_stream, archive.open(tgt_member) as tgt_stream:
            yield from aligned_batches(
                src_stream,
                tgt_stream,
                report,
                left_name=f"{zip_path}:{src_member}",
                right_name=f"{zip_path}:{tgt_member}",
                batch_size=batch_size,
            )
