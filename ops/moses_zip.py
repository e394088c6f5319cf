"""Reading OPUS moses zips: two line-aligned members streamed in lockstep, never extracted.

An OPUS moses zip for the pair ``l1-l2`` (codes sorted alphabetically, e.g. ``de-en``,
``en-zh_cn``) holds ``{Corpus}.{l1}-{l2}.{l1}`` and ``{Corpus}.{l1}-{l2}.{l2}`` plus README,
LICENSE and ``.ids``/``.xml`` files, which are ignored. Both sides are read in blocks of whole
byte lines, decoded and split a block at a time, and paired line by line in batches. One bad
line is a counted skip rather than a failed corpus: a pair is skipped as ``empty`` when either
side is blank and as ``undecodable`` when either side is not valid UTF-8. Nothing is ever
written from a zip, and a zip whose member names are absolute or climb out with ``..`` is
refused outright.
"""

from __future__ import annotations

import logging
import queue
import re
import threading
import zipfile
from collections.abc import Iterable, Iterator
from contextlib import ExitStack, suppress
from itertools import compress, islice
from operator import not_
from pathlib import Path, PurePosixPath, PureWindowsPath
from typing import BinaryIO

from ops.stage_report import StageReport

log = logging.getLogger(__name__)

#: Bytes read from each side at a time (cut at the last newline, the rest carried over).
READ_BLOCK = 1 << 20
#: Line pairs per batch handed to callers (about one pair-file write each).
BATCH_PAIRS = 65_536
_CRS_BEFORE_NEWLINE = re.compile("\r+\n")


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
    Corpus-sized readers should take the batches, which never build a tuple per pair.
    """
    for sources, targets in aligned_batches(
        left, right, report, left_name=left_name, right_name=right_name
    ):
        yield from zip(sources, targets, strict=True)


def aligned_batches(
    left: Iterable[bytes],
    right: Iterable[bytes],
    report: StageReport,
    *,
    left_name: str,
    right_name: str,
    batch_size: int = BATCH_PAIRS,
    block_size: int = READ_BLOCK,
) -> Iterator[tuple[list[str], list[str]]]:
    """Yield cleaned ``(left_lines, right_lines)`` batches from two line-aligned byte streams.

    ``left``/``right`` are binary streams (zip members, gzip or plain files: anything with
    ``read(n)``), read ``block_size`` bytes at a time, or any other iterable of byte lines (one
    item per line). Lines are what iterating a binary file yields (split after ``b"\n"``; a
    last line without one still counts), cleaned as :func:`clean_line` cleans them. Whole
    blocks are decoded and split at once, which is what makes this ~4x cheaper than a Python
    loop per line; the two sides are paired line by line however their blocks fall.

    Every line pair counts in ``report.n_in``; a pair is skipped (``report.drop``) as
    ``undecodable`` when either side is not UTF-8, else as ``empty`` when either side is blank
    (``str.strip`` semantics). A batch covers up to ``batch_size`` line pairs, so it holds that
    many less the skipped ones; a batch with nothing left is not yielded. ``report.n_out`` is
    left to the caller, who decides what to keep.

    Raises:
        ValueError: the streams have different numbers of lines, naming both and the line
            where the shorter one ends (after every pair before it has been yielded).
    """
    with ExitStack() as readers:
        sides = (
            _PendingLines(_line_blocks(left, block_size, readers)),
            _PendingLines(_line_blocks(right, block_size, readers)),
        )
        while True:
            for side in sides:
                side.fill(batch_size)
            count = min(batch_size, len(sides[0].lines), len(sides[1].lines))
            if count:
                (sources, left_bad), (targets, right_bad) = (side.take(count) for side in sides)
                sources, targets = _drop_skipped(sources, targets, left_bad | right_bad, report)
                if sources:
                    yield sources, targets
            elif sides[0].lines or sides[1].lines:
                shorter, name = (sides[1], right_name) if sides[0].lines else (sides[0], left_name)
                raise ValueError(
                    f"{left_name} and {right_name} are not line-aligned: {name} ends after line "
                    f"{shorter.taken} while the other side goes on"
                )
            else:
                return


class _PendingLines:
    """One side's cleaned lines not yet paired, pulled a block at a time as pairing needs.

    The sides' blocks end at different lines, so each side keeps what it has read past the
    other. Undecodable lines are held as ``""`` with their numbers kept aside, so the blank
    check can run over plain strings and still tell the two skips apart.
    """

    def __init__(self, blocks: Iterator[tuple[list[str], set[int]]]) -> None:
        self._blocks = blocks
        self._done = False
        self._bad: list[int] = []  # 0-based numbers of the undecodable lines still pending
        self.lines: list[str] = []
        self.taken = 0  # lines handed out so far

    def fill(self, count: int) -> None:
        """Read blocks until ``count`` lines are pending or the stream is done."""
        while len(self.lines) < count and not self._done:
            block = next(self._blocks, None)
            if block is None:
                self._done = True
                return
            lines, bad = block
            first = self.taken + len(self.lines)
            self._bad.extend(sorted(first + index for index in bad))
            if self.lines:
                self.lines.extend(lines)
            else:
                self.lines = lines

    def take(self, count: int) -> tuple[list[str], set[int]]:
        """The next ``count`` lines and the indices (within them) of the undecodable ones."""
        if count == len(self.lines):
            lines, self.lines = self.lines, []
        else:
            lines = self.lines[:count]
            del self.lines[:count]
        end = self.taken + count
        bad = {number - self.taken for number in self._bad if number < end}
        if bad:
            self._bad = [number for number in self._bad if number >= end]
        self.taken = end
        return lines, bad


def _line_blocks(
    source: Iterable[bytes], block_size: int, readers: ExitStack
) -> Iterator[tuple[list[str], set[int]]]:
    """Cleaned lines block by block, with the indices of the undecodable ones (held as ``""``).

    A binary stream is read ahead on a thread (see :class:`_ReadAhead`, closed by ``readers``)
    in blocks of ``block_size``; any other iterable is taken as byte lines, one item per line,
    and cleaned one by one (the old contract of :func:`aligned_pairs`, kept for it).
    """
    if hasattr(source, "read"):
        chunks = readers.enter_context(_ReadAhead(source, block_size))
        yield from map(_decode_lines, _whole_line_blocks(chunks))
        return
    items = iter(source)
    while chunk := list(islice(items, BATCH_PAIRS)):
        cleaned = [clean_line(item) for item in chunk]
        yield (
            [text or "" for text in cleaned],
            {index for index, text in enumerate(cleaned) if text is None},
        )


class _ReadAhead:
    """A binary stream's ``read(block_size)`` chunks, read on a thread a few chunks ahead.

    Inflating a zip member or a gzip file is about half the cost of reading a corpus, and zlib
    releases the GIL while it works, so both sides inflate beside the decoding and splitting
    done on the caller's thread. Iterating gives the chunks in order and re-raises what a read
    raised (a CRC error, a truncated member); :meth:`close` stops and joins the thread, so it
    never touches the stream after the caller has closed it.
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
    """The chunks regrouped into blocks of whole lines, each ending in ``b"\n"``.

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


def _decode_lines(block: bytes) -> tuple[list[str], set[int]]:
    """The cleaned lines of a whole-line block and the indices of its undecodable lines.

    Same result as :func:`clean_line` on every line: a newline is ASCII and never inside a
    UTF-8 sequence, so the block decodes exactly when each line does, and stripping the
    ``"\r"`` run before each newline is ``rstrip("\r\n")`` of that line.
    """
    try:
        text, bad = block.decode("utf-8"), set()
    except UnicodeDecodeError:
        text, bad = _decode_around_errors(block)
    if "\r" in text:
        text = _CRS_BEFORE_NEWLINE.sub("\n", text).replace("\r", " ")
    lines = text.split("\n")
    lines.pop()  # the block ends in a newline: nothing after it
    return lines, bad


def _decode_around_errors(block: bytes) -> tuple[str, set[int]]:
    """Decode a whole-line block holding invalid UTF-8: each bad line becomes ``""``.

    A failed decode names the first bad byte; its line is blanked and decoding resumes after
    it, so a block costs one decode attempt per bad line rather than a loop over all lines.
    Returns the text and the indices of the bad lines.
    """
    view = memoryview(block)
    pieces: list[str] = []
    bad: set[int] = set()
    position = line = 0
    while True:
        try:
            pieces.append(str(view[position:], "utf-8"))
            return "".join(pieces), bad
        except UnicodeDecodeError as error:
            first_bad = position + error.start
        line_start = max(block.rfind(b"\n", position, first_bad) + 1, position)
        pieces.append(str(view[position:line_start], "utf-8"))
        line += block.count(b"\n", position, line_start)
        bad.add(line)
        pieces.append("\n")
        line += 1
        position = block.index(b"\n", first_bad) + 1


def _drop_skipped(
    sources: list[str], targets: list[str], undecodable: set[int], report: StageReport
) -> tuple[list[str], list[str]]:
    """Count the line pairs, drop those with an undecodable or blank side, return the rest."""
    report.n_in += len(sources)
    blank = _blank_indices(sources) | _blank_indices(targets)
    report.drop("undecodable", len(undecodable))
    report.drop("empty", len(blank - undecodable))
    skipped = undecodable | blank
    if not skipped:
        return sources, targets
    keep = bytearray(b"\x01") * len(sources)
    for index in skipped:
        keep[index] = 0
    return list(compress(sources, keep)), list(compress(targets, keep))


def _blank_indices(lines: list[str]) -> set[int]:
    """Indices of the lines that are empty or whitespace only (``str.strip`` semantics).

    ``str.strip`` returns the line itself unless it has whitespace at an end, so the common
    all-non-blank case costs one C-level pass.
    """
    if all(map(str.strip, lines)):
        return set()
    return set(compress(range(len(lines)), map(not_, map(str.strip, lines))))


def read_moses_zip(
    zip_path: str | Path, *, corpus: str, src_lang: str, tgt_lang: str, report: StageReport
) -> Iterator[tuple[str, str]]:
    """Stream ``(src, tgt)`` pairs from an OPUS moses zip: :func:`read_moses_zip_batches`
    pair by pair, for callers that want tuples."""
    for sources, targets in read_moses_zip_batches(
        zip_path, corpus=corpus, src_lang=src_lang, tgt_lang=tgt_lang, report=report
    ):
        yield from zip(sources, targets, strict=True)


def read_moses_zip_batches(
    zip_path: str | Path,
    *,
    corpus: str,
    src_lang: str,
    tgt_lang: str,
    report: StageReport,
    batch_size: int = BATCH_PAIRS,
) -> Iterator[tuple[list[str], list[str]]]:
    """Stream ``(src_lines, tgt_lines)`` batches from an OPUS moses zip, in the caller's order.

    ``src_lang``/``tgt_lang`` are the codes as OPUS spells them (``en``, ``zh_cn``); the zip's
    pair name is the two sorted alphabetically, and the sides are swapped as needed so the first
    list of each batch is always ``src_lang``. Skips are counted in ``report`` (see
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
