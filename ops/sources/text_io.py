"""Reading line-aligned text files (plain or gzip) in lockstep, and atomic outputs."""

from __future__ import annotations

import gzip
import io
import os
from collections.abc import Iterator
from contextlib import contextmanager
from itertools import zip_longest
from pathlib import Path
from typing import IO


def open_text(path: str | Path) -> IO[str]:
    """Open a UTF-8 text file for reading, gunzipping ``.gz`` files transparently."""
    path = Path(path)
    if path.suffix == ".gz":
        return io.TextIOWrapper(gzip.open(path, "rb"), encoding="utf-8", newline="\n")
    return open(path, encoding="utf-8", newline="\n")


def read_aligned(source: str | Path, target: str | Path) -> Iterator[tuple[str, str]]:
    """Yield ``(source_line, target_line)`` pairs without newlines.

    Raises:
        ValueError: the files have different numbers of lines (naming both and the line).
    """
    with open_text(source) as left, open_text(target) as right:
        for number, (first, second) in enumerate(zip_longest(left, right), 1):
            if first is None or second is None:
                shorter = source if first is None else target
                raise ValueError(
                    f"{source} and {target} are not line-aligned: {shorter} ends after line "
                    f"{number - 1}"
                )
            yield first.rstrip("\r\n"), second.rstrip("\r\n")


@contextmanager
def atomic_path(final: str | Path) -> Iterator[Path]:
    """Yield a temporary path beside ``final``; rename it to ``final`` if the block succeeds."""
    final = Path(final)
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = final.with_name(f".{final.name}.tmp-{os.getpid()}")
    try:
        yield tmp
        os.replace(tmp, final)
    finally:
        tmp.unlink(missing_ok=True)
