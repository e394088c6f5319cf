"""Output files of the ``psp`` command: checked before any work, written under a temporary name,
synced and renamed into place, removed when anything fails, and every write error reported as
one line naming the output (``no space left on device writing vectors.npy``).

Outputs never clobber what is not theirs (:func:`check_output_file`,
:func:`check_output_directory`): an output that is one of the command's inputs, contains one, or
lies inside an input folder is refused, always; an existing non-empty folder is replaced only
when it carries the marker of an earlier output of the same kind (a bundle's ``config.json``,
an export's ``psp_export.json``), or when the caller says ``overwrite``. Existing files are
replaced (like ``cp`` or ``sort -o``), unless they are an input.

Arrays are written with plain writes after reserving the file's full size, never through a
memory map: on a full disk a store into a memory-mapped sparse file kills the process with
SIGBUS, where a write raises ENOSPC. (``psp embed``'s ``.npy`` vectors skip the page cache where
they can: :mod:`psp_core.files.direct_writes`.)
"""

from __future__ import annotations

import errno
import io
import os
import re
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from math import prod
from pathlib import Path
from typing import IO

import numpy as np

from psp_core.files.stale_temps import remove_stale_temps_beside


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


def _absolute(path: str | Path) -> Path:
    """``path`` made absolute and normalized (``.`` and ``..`` resolved, symbolic links too)."""
    return Path(os.path.realpath(path))


def check_not_an_input(
    output: str | Path, inputs: Iterable[str | Path | None], what: str = "output"
) -> None:
    """Refuse an output that is one of ``inputs``, contains one, or lies inside an input folder
    (writing there would destroy or corrupt it). Symbolic and hard links count as the same."""
    target = _absolute(output)
    for given in inputs:
        if given is None or not os.path.lexists(given):
            continue
        source = _absolute(given)
        if target == source or (target.exists() and os.path.samefile(target, source)):
            raise OutputError(f"{what} {output} is the input {given}; choose another path")
        if target in source.parents:
            raise OutputError(
                f"{what} {output} contains the input {given}; writing it would destroy that "
                "input, choose another path"
            )
        if source.is_dir() and source in target.parents:
            raise OutputError(
                f"{what} {output} is inside the input folder {given}; choose a path outside it"
            )


def check_output_file(
    path: str | Path, what: str = "output file", *, inputs: Iterable[str | Path | None] = ()
) -> Path:
    """Refuse, before any work, a file path that is a directory, cannot be created, or is (or
    lies inside) one of ``inputs``."""
    path = Path(path)
    if path.is_dir():
        raise OutputError(f"{what} {path} is a directory; expected a file name")
    _check_parent(path, what)
    check_not_an_input(path, inputs, what)
    return path


def check_output_directory(
    path: str | Path,
    what: str = "output directory",
    *,
    is_ours: Callable[[Path], bool] | None = None,
    ours: str = "",
    overwrite: bool = False,
    inputs: Iterable[str | Path | None] = (),
) -> Path:
    """Refuse, before any work, a directory path that is a file, cannot be created, is (or
    contains, or lies inside) one of ``inputs``, or (with ``is_ours``) is an existing non-empty
    directory that ``is_ours`` does not recognize as an earlier output of the same kind (named
    ``ours`` in the message), unless ``overwrite``."""
    path = Path(path)
    target = _absolute(path)
    if not target.name:
        raise OutputError(f"{what} {path} names no folder that can be written")
    here = _absolute(os.getcwd())
    if target == here or target in here.parents:
        raise OutputError(
            f"{what} {path} is the current directory or holds it; name the folder to write, "
            f"such as {Path(path) / 'model'}"
        )
    if os.path.lexists(path) and not path.is_dir():
        raise OutputError(f"{what} {path} exists and is not a directory")
    _check_parent(path, what)
    check_not_an_input(path, inputs, what)
    if is_ours is not None and not overwrite and path.is_dir() and not is_ours(path):
        if any(os.scandir(path)):
            raise OutputError(
                f"{what} {path} already exists with other files in it and is not {ours}; "
                "refusing to replace it (choose a new folder, or pass --overwrite to replace it)"
            )
    return path


# how Rust writers (safetensors, tokenizers) report an OS error: "... (os error 28)"
_RUST_OS_ERROR = re.compile(r"\(os error (\d+)\)")


def os_error_code(error: BaseException) -> int | None:
    """The errno behind ``error``: an ``OSError``'s, or the one a Rust library's message names."""
    if isinstance(error, OSError) and error.errno is not None:
        return error.errno
    match = _RUST_OS_ERROR.search(str(error))
    return int(match.group(1)) if match else None


def write_error(path: str | Path, error: BaseException) -> OutputError:
    """``no space left on device writing PATH`` and the like, from a failed write (an
    ``OSError``, or a library's error that names one)."""
    code = os_error_code(error)
    reason = getattr(error, "strerror", None) or (os.strerror(code) if code else str(error))
    return OutputError(f"{reason[:1].lower()}{reason[1:]} writing {path}")


@contextmanager
def replaced_when_done(path: str | Path, mode: str = "wb") -> Iterator[IO]:
    """Open a temporary file beside ``path``; rename it onto ``path`` when the block ends
    normally, remove it otherwise (Ctrl-C and SIGTERM included, where the CLI turns SIGTERM into
    an exception). Temporaries that killed writers of ``path`` left are removed first. Write errors become :class:`OutputError` naming ``path``."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    remove_stale_temps_beside(path)  # what killed runs of this output left
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


def write_text_if_changed(path: str | Path, text: str) -> bool:
    """Write ``text`` to ``path`` whole (:func:`replaced_when_done`), unless the file holds
    exactly that text already: a re-run that computes the same text leaves the file (its inode
    and modification time) as it was. True when it wrote."""
    path = Path(path)
    try:
        if path.read_text(encoding="utf-8") == text:
            return False
    except (OSError, UnicodeDecodeError):
        pass  # absent or unreadable: written below
    with replaced_when_done(path, "w") as handle:
        handle.write(text)
    return True


class NpyWriter:
    """Write a C-ordered ``.npy`` array of a known shape in consecutive row blocks."""

    def __init__(self, handle: IO[bytes], shape: tuple[int, int], dtype=np.float32) -> None:
        self.handle, self.shape, self.dtype = handle, shape, np.dtype(dtype)
        self.rows = 0
        handle.write(self._header())
        handle.flush()
        #: where the rows start in the file
        self.data_start = handle.tell()
        #: whether the file's full size is allocated (where the platform can)
        self.reserved = reserve_space(handle, prod(shape) * self.dtype.itemsize)

    def _header(self) -> bytes:
        """The ``.npy`` header (format 1.0, as ``np.save`` writes it)."""
        header = {
            "descr": np.lib.format.dtype_to_descr(self.dtype),
            "fortran_order": False,
            "shape": self.shape,
        }
        buffer = io.BytesIO()
        np.lib.format.write_array_header_1_0(buffer, header)
        return buffer.getvalue()

    def __enter__(self) -> NpyWriter:
        return self

    def __exit__(self, *exception) -> None:
        pass

    def write(self, rows: np.ndarray, ids=None) -> None:
        """Append ``rows``; ``ids`` must be ``None`` (an ``.npy`` file has no place for them)."""
        rows = self._checked(rows, ids)
        self.handle.write(rows.data)
        self.rows += len(rows)

    def _checked(self, rows: np.ndarray, ids) -> np.ndarray:
        """``rows`` as a C-contiguous array of the file's dtype, checked against its shape (and
        no ``ids``)."""
        if ids is not None:
            raise ValueError("an .npy array has no id column: write ids to a Parquet file")
        rows = np.ascontiguousarray(rows, dtype=self.dtype)
        if rows.ndim != 2 or rows.shape[1] != self.shape[1]:
            raise ValueError(f"rows of shape {rows.shape}, expected [*, {self.shape[1]}]")
        if self.rows + len(rows) > self.shape[0]:
            raise ValueError(f"more than the {self.shape[0]} rows announced")
        return rows

    def close(self) -> None:
        if self.rows != self.shape[0]:
            raise ValueError(f"{self.rows} rows written, {self.shape[0]} announced")


def reserve_space(handle: IO[bytes], size: int) -> bool:
    """Allocate ``size`` bytes from the handle's position up front where the platform can: a full
    disk fails here, before the work. The file's size grows to cover them. Whether they were
    allocated (``False`` where the platform or the filesystem cannot)."""
    if not hasattr(os, "posix_fallocate"):
        return False
    try:
        os.posix_fallocate(handle.fileno(), handle.tell(), size)
    except OSError as error:
        if error.errno not in (errno.EOPNOTSUPP, errno.EINVAL):
            raise  # ENOSPC, EFBIG, EDQUOT: the output will not fit
        return False
    return True
