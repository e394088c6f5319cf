"""Output files of the ``psp`` command: checked before any work, written under a temporary name,
synced and renamed into place, removed when anything fails, and every write error reported as
one line naming the output (``no space left on device writing vectors.npy``).

Arrays are written with plain buffered writes after reserving the file's full size, never
through a memory map: on a full disk a store into a memory-mapped sparse file kills the process
with SIGBUS, where a write raises ENOSPC.
"""

from __future__ import annotations

import errno
import os
from collections.abc import Iterator
from contextlib import contextmanager
from math import prod
from pathlib import Path
from typing import IO

import numpy as np


class OutputError(Exception):
    """An output path that cannot be written: printed by the CLI as one line, exit code 2."""


def _nearest_existing(path: Path) -> Path:
    for candidate in (path, *path.parents):
        if os.path.lexists(candidate):
            return candidate
    return Path(".")


def _check_parent(path: Path, what: str) -> None:
    existing = _nearest_existing(path.parent.absolute())
    if not existing.is_dir():
        raise OutputError(f"{what} {path}: {existing} is not a directory")
    if not os.access(existing, os.W_OK | os.X_OK):
        raise OutputError(
            f"{what} {path}: cannot write in {existing} (permission denied or read-only file system)"
        )


def check_output_file(path: str | Path, what: str = "output file") -> Path:
    """Refuse, before any work, a file path that is a directory or cannot be created."""
    path = Path(path)
    if path.is_dir():
        raise OutputError(f"{what} {path} is a directory; expected a file name")
    _check_parent(path, what)
    return path


def check_output_directory(path: str | Path, what: str = "output directory") -> Path:
    """Refuse, before any work, a directory path that is a file or cannot be created."""
    path = Path(path)
    if os.path.lexists(path) and not path.is_dir():
        raise OutputError(f"{what} {path} is not a directory")
    _check_parent(path, what)
    return path


def write_error(path: str | Path, error: OSError) -> OutputError:
    """``no space left on device writing PATH`` and the like, from a failed write."""
    reason = error.strerror or os.strerror(error.errno or 0) or str(error)
    return OutputError(f"{reason[:1].lower()}{reason[1:]} writing {path}")


@contextmanager
def replaced_when_done(path: str | Path, mode: str = "wb") -> Iterator[IO]:
    """Open a temporary file beside ``path``; rename it onto ``path`` when the block ends
    normally, remove it otherwise. Write errors become :class:`OutputError` naming ``path``."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    encoding = None if "b" in mode else "utf-8"
    try:
        with open(tmp, mode, encoding=encoding) as handle:
            yield handle
            handle.flush()
            os.fsync(handle.fileno())  # write-back errors surface here, before the rename
        os.replace(tmp, path)
    except OSError as error:
        tmp.unlink(missing_ok=True)
        if error.filename not in (None, str(tmp)):
            raise  # not this output's fault (an input, say): the error names its own file
        raise write_error(path, error) from error
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


class NpyWriter:
    """Write a C-ordered ``.npy`` array of a known shape in consecutive row blocks."""

    def __init__(self, handle: IO[bytes], shape: tuple[int, int], dtype=np.float32) -> None:
        self.handle, self.shape, self.dtype = handle, shape, np.dtype(dtype)
        self.rows = 0
        header = {
            "descr": np.lib.format.dtype_to_descr(self.dtype),
            "fortran_order": False,
            "shape": shape,
        }
        np.lib.format.write_array_header_1_0(handle, header)
        handle.flush()
        _reserve(handle, handle.tell() + prod(shape) * self.dtype.itemsize)

    def write(self, rows: np.ndarray) -> None:
        rows = np.ascontiguousarray(rows, dtype=self.dtype)
        if rows.ndim != 2 or rows.shape[1] != self.shape[1]:
            raise ValueError(f"rows of shape {rows.shape}, expected [*, {self.shape[1]}]")
        if self.rows + len(rows) > self.shape[0]:
            raise ValueError(f"more than the {self.shape[0]} rows announced")
        self.handle.write(rows.data)
        self.rows += len(rows)

    def close(self) -> None:
        if self.rows != self.shape[0]:
            raise ValueError(f"{self.rows} rows written, {self.shape[0]} announced")


def _reserve(handle: IO[bytes], size: int) -> None:
    """Allocate ``size`` bytes up front where the platform can: a full disk fails here."""
    if not hasattr(os, "posix_fallocate"):
        return
    try:
        os.posix_fallocate(handle.fileno(), 0, size)
    except OSError as error:
        if error.errno not in (errno.EOPNOTSUPP, errno.EINVAL):
            raise  # ENOSPC, EFBIG, EDQUOT: the output will not fit
