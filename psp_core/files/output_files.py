"""Output files of the ``psp`` command: checked before any work, written under a temporary name,
synced and renamed into place, removed when anything fails, and every write error reported as
one line naming the output (``no space left on device writing vectors.npy``).

What a path names decides how it is written (:func:`psp_core.files.output_targets.resolve_output`):
a regular file, or nothing yet, is replaced as above; a symbolic link is followed and its
target replaced, the temporary beside the target; a device, a FIFO, an open descriptor
(``/dev/stdout``) or ``-`` (standard output) is written into, front to back, without a
temporary.

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
import sys
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from math import prod
from pathlib import Path
from typing import IO

import numpy as np

from psp_core.files.new_folders import parents_made
from psp_core.files.output_targets import (
    DIRECTORY,
    STANDARD_OUTPUT,
    STREAM,
    OutputError,
    OutputTarget,
    remove_stale_temps_of,
    resolve_output,
)


def _nearest_existing(path: Path) -> Path:
    for candidate in (path, *path.parents):
        if os.path.lexists(candidate):
            return candidate
    return Path(".")


def _check_parent(path: str | Path, target: Path, what: str) -> None:
    """Refuse ``path`` (named so) when the folder its ``target`` is written in cannot be made or
    written (the temporary is created there)."""
    existing = _nearest_existing(target.parent)
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


def check_outputs_apart(
    first: str | Path, first_what: str, second: str | Path, second_what: str
) -> None:
    """Refuse, before any work, two outputs of one command that are the same path or one
    inside the other (whether or not they exist yet): writing one would replace the other."""
    one, two = _absolute(first), _absolute(second)
    if one == two or one in two.parents or two in one.parents:
        relation = "is" if one == two else ("holds" if one in two.parents else "is inside")
        raise OutputError(
            f"{first_what} {first} {relation} the {second_what} {second}; give them separate "
            "folders"
        )


def check_output_file(
    path: str | Path, what: str = "output file", *, inputs: Iterable[str | Path | None] = ()
) -> OutputTarget:
    """Refuse, before any work, a file path that is a directory, cannot be created, is a device
    or FIFO that cannot be opened for writing, or is (or lies inside) one of ``inputs``, links
    followed. Returns the output resolved (:func:`resolve_output`): how it will be written."""
    output = resolve_output(path)
    if output.kind == DIRECTORY:
        raise OutputError(f"{what} {path} is a directory; expected a file name")
    if output.kind == STREAM and not os.access(output.target, os.W_OK):
        raise OutputError(f"{what} {path}: cannot write to it (permission denied)")
    if not output.streamed:
        _check_parent(path, output.target, what)
    if output.kind != STANDARD_OUTPUT:
        check_not_an_input(path, inputs, what)
    return output


def check_output_directory(
    path: str | Path,
    what: str = "output directory",
    *,
    is_ours: Callable[[Path], bool] | None = None,
    ours: str = "",
    overwrite: bool = False,
    inputs: Iterable[str | Path | None] = (),
) -> Path:
    """Refuse, before any work, a directory path that is a file, a device, a FIFO or standard
    output, cannot be created, is (or contains, or lies inside) one of ``inputs``, or (with
    ``is_ours``) is an existing non-empty directory that ``is_ours`` does not recognize as an
    earlier output of the same kind (named ``ours`` in the message), unless ``overwrite``. A
    link is followed: its target is what is checked, and what will be replaced."""
    output = resolve_output(path)
    if output.kind == STANDARD_OUTPUT:
        raise OutputError(f"{what} - is standard output, not a folder (./- names a folder -)")
    path = Path(path)
    target = output.target
    if not target.name:
        raise OutputError(f"{what} {path} names no folder that can be written")
    here = _absolute(os.getcwd())
    if target == here or target in here.parents:
        raise OutputError(
            f"{what} {path} is the current directory or holds it; name the folder to write, "
            f"such as {Path(path) / 'model'}"
        )
    if os.path.lexists(target) and output.kind != DIRECTORY:
        raise OutputError(f"{what} {path} exists and is not a directory")
    _check_parent(path, target, what)
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
def replaced_when_done(output: str | Path | OutputTarget, mode: str = "wb") -> Iterator[IO]:
    """Open ``output`` for writing as its kind asks (:func:`resolve_output`), and yield the handle.

    A regular file (or a new one, or the target of a link) is written as a temporary file beside
    it, synced and renamed onto it when the block ends normally, removed otherwise (Ctrl-C and
    SIGTERM included, where the CLI turns SIGTERM into an exception); temporaries that killed
    writers of it left are removed first. A device, FIFO, descriptor or standard output is
    written into (:func:`written_into`). Write errors become :class:`OutputError` naming the
    output."""
    output = resolve_output(output)
    if output.streamed:
        with written_into(output, mode) as handle:
            yield handle
        return
    path = output.target
    with parents_made(path.parent):  # (taken back if the output fails)
        remove_stale_temps_of(output)  # what killed runs of this output left
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
            raise write_error(output.shown, error) from error
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise


@contextmanager
def written_into(output: OutputTarget, mode: str = "wb") -> Iterator[IO]:
    """Write into a device, a FIFO, a descriptor or standard output, in place, front to back
    (what ``cp`` and ``tee`` do): opened as it is (a FIFO's open waits for a reader), flushed
    and, where the kind allows, synced when the block ends. What was written stays when the
    block fails: a stream cannot be taken back. A reader that went away (EPIPE) ends the
    command quietly, as for any pipe; other write errors become :class:`OutputError` naming
    the output."""
    if output.kind == STANDARD_OUTPUT:
        with _standard_output(mode) as handle:
            yield handle
        return
    sys.stdout.flush()  # what the command printed comes first when this is /dev/stdout
    try:
        handle = open(
            output.target, mode, encoding=None if "b" in mode else "utf-8", opener=_no_terminal
        )
    except OSError as error:
        raise write_error(output.shown, error) from error
    try:
        yield handle
        handle.flush()
        _sync_if_possible(handle)
        handle.close()
    except BrokenPipeError:
        _close_quietly(handle)
        raise
    except OSError as error:
        _close_quietly(handle)
        if error.filename not in (None, str(output.target)):
            raise
        raise write_error(output.shown, error) from error
    except BaseException:
        _close_quietly(handle)
        raise


@contextmanager
def _standard_output(mode: str) -> Iterator[IO]:
    """The process's standard output (its bytes for a binary ``mode``), flushed at the end and
    left open. When it cannot be written (a full disk), it is pointed at /dev/null so that the
    interpreter's last flush does not fail again at exit."""
    sys.stdout.flush()
    handle = sys.stdout.buffer if "b" in mode else sys.stdout
    try:
        yield handle
        handle.flush()
    except BrokenPipeError:
        raise  # the reader stopped (psp score | head): the CLI stops quietly
    except OSError as error:
        if error.filename is not None:
            raise  # an input's error
        abandon_stdout()
        raise write_error("standard output", error) from error


def abandon_stdout() -> None:
    """Point standard output at /dev/null, so that the interpreter's last flush of what could
    not be written does not fail again at exit (the recipe of Python's ``signal`` docs)."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)


def _no_terminal(path: str, flags: int) -> int:
    """Open as ``open`` would, with ``O_NOCTTY``: an output that is a terminal never becomes
    the controlling terminal of a process that has none (a daemon, a session leader)."""
    return os.open(path, flags | os.O_NOCTTY, 0o666)


def _sync_if_possible(handle: IO) -> None:
    """fsync, where the kind of file has anything to sync (a block device, a regular file behind
    a descriptor); pipes and character devices answer EINVAL."""
    try:
        os.fsync(handle.fileno())
    except OSError as error:
        if error.errno not in (errno.EINVAL, errno.EOPNOTSUPP, errno.EROFS):
            raise


def _close_quietly(handle: IO) -> None:
    """Close a handle whose writes failed; the flush of what is still buffered fails too."""
    try:
        handle.close()
    except OSError:
        pass


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
    """Write a C-ordered ``.npy`` array of a known shape in consecutive row blocks.

    The shape goes first, in the header, so the row count must be known before the first row.
    With ``reserve`` (a file) the array's size is allocated up front; without it (a stream: a
    device, a FIFO, standard output) the handle is only ever appended to."""

    def __init__(
        self, handle: IO[bytes], shape: tuple[int, int], dtype=np.float32, *, reserve: bool = True
    ) -> None:
        self.handle, self.shape, self.dtype = handle, shape, np.dtype(dtype)
        self.rows = 0
        header = self._header()
        handle.write(header)
        handle.flush()
        #: where the rows start in the file
        self.data_start = handle.tell() if reserve else len(header)
        #: whether the file's full size is allocated (where the platform can)
        self.reserved = reserve and reserve_space(handle, prod(shape) * self.dtype.itemsize)

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
