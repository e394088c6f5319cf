"""Reading OPUS moses zips: two line-aligned members streamed in lockstep, never extracted.

An OPUS moses zip for the pair ``l1-l2`` (codes sorted alphabetically, e.g. ``de-en``,
``en-zh_cn``) holds ``{Corpus}.{l1}-{l2}.{l1}`` and ``{Corpus}.{l1}-{l2}.{l2}`` plus README,
LICENSE and ``.ids``/``.xml`` files, which are ignored. Both sides are read as byte lines and
decoded line by line, so one bad line is a counted skip rather than a failed corpus: a pair is
skipped as ``empty`` when either side is blank and as ``undecodable`` when either side is not
valid UTF-8. Nothing is ever written from a zip, and a zip whose member names are absolute or
climb out with ``..`` is refused outright.
"""

from __future__ import annotations

import io
import logging
import zipfile
from collections.abc import Iterable, Iterator
from itertools import zip_longest
from pathlib import Path, PurePosixPath, PureWindowsPath

from ops.stage_report import StageReport

log = logging.getLogger(__name__)

READ_BUFFER = 1 << 20


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

    Counts every line pair in ``report.n_in`` and skips (``report.drop``) pairs with an empty
    (blank) or undecodable side. ``report.n_out`` is left to the caller, who decides what to keep.

    Raises:
        ValueError: the streams have different numbers of lines, naming both and the line.
    """
    for number, (first, second) in enumerate(zip_longest(left, right), 1):
        if first is None or second is None:
            shorter = left_name if first is None else right_name
            raise ValueError(
                f"{left_name} and {right_name} are not line-aligned: {shorter} ends after line "
                f"{number - 1} while the other side goes on"
            )
        report.n_in += 1
        source, target = clean_line(first), clean_line(second)
        if source is None or target is None:
            report.drop("undecodable")
        elif not source.strip() or not target.strip():
            report.drop("empty")
        else:
            yield source, target


def read_moses_zip(
    zip_path: str | Path, *, corpus: str, src_lang: str, tgt_lang: str, report: StageReport
) -> Iterator[tuple[str, str]]:
    """Stream ``(src, tgt)`` pairs from an OPUS moses zip, in the caller's language order.

    ``src_lang``/``tgt_lang`` are the codes as OPUS spells them (``en``, ``zh_cn``); the zip's
    pair name is the two sorted alphabetically, and the sides are swapped as needed so the first
    element of each pair is always ``src_lang``. Skips are counted in ``report`` (see
    :func:`aligned_pairs`).

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
        with (
            io.BufferedReader(archive.open(src_member), READ_BUFFER) as src_lines,
            io.BufferedReader(archive.open(tgt_member), READ_BUFFER) as tgt_lines,
        ):
            yield from aligned_pairs(
                src_lines,
                tgt_lines,
                report,
                left_name=f"{zip_path}:{src_member}",
                right_name=f"{zip_path}:{tgt_member}",
            )
