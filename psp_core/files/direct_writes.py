"""``.npy`` outputs written past the page cache (Linux ``O_DIRECT``), from buffers aligned to it.

A buffered write copies every byte into the kernel's page cache first: for ``psp embed`` at dim
1024 that is 1 GB per 250,000 sentences, copied by the writing thread on the other core while
the embedding runs. On two cores that copy slows the embedding itself down (the cores share
the memory bandwidth and the last-level cache), where the same rows written with ``O_DIRECT``
cost the embedding little (benchmarks/RESULTS.md#embed-cli).

``O_DIRECT`` needs the file offset, the length and the memory address of each write aligned to
the device's block. :class:`DirectNpyWriter` pads the ``.npy`` header to :data:`DIRECT_ALIGN`
bytes (a valid header: ``np.load`` reads any length), so rows start on a block; a write whose
offset and buffer are aligned goes to disk directly up to its last whole block, and the rest of
it (the last rows of a file, rows from an unaligned buffer) through the page cache as before.
Where the filesystem refuses ``O_DIRECT`` (tmpfs), or its space could not be reserved up front,
every write is buffered. The caller syncs the file before renaming it, as for any output.
"""

from __future__ import annotations

import errno
import os
from typing import IO

import numpy as np

from psp_core.files.output_files import NpyWriter

#: the alignment of direct writes: a multiple of every block size in use (512 or 4096 bytes)
DIRECT_ALIGN = 4096


class DirectNpyWriter(NpyWriter):
    """An :class:`~psp_core.files.output_files.NpyWriter` whose aligned writes bypass the page cache.

    The file's rows start at :data:`DIRECT_ALIGN`; writes go to explicit offsets (``pwrite``),
    so the rows may be written in any number of calls of any size, as with the plain writer."""

    def __init__(self, handle: IO[bytes], shape: tuple[int, int], dtype=np.float32) -> None:
        super().__init__(handle, shape, dtype)
        self.row_bytes = shape[1] * self.dtype.itemsize
        self._direct_fd = self._open_direct() if self.reserved else None

    def _header(self) -> bytes:
        header = super()._header()
        # magic (6) + version (2) + length (2), then the dict, spaces and a newline
        text = header[10:].rstrip(b"\n").rstrip(b" ")
        length = -(-(10 + len(text) + 1) // DIRECT_ALIGN) * DIRECT_ALIGN - 10
        return header[:8] + length.to_bytes(2, "little") + text.ljust(length - 1) + b"\n"

    def _open_direct(self) -> int | None:
        if not hasattr(os, "O_DIRECT"):
            return None
        try:  # the same open file again (not its name: it may be renamed meanwhile)
            return os.open(f"/proc/self/fd/{self.handle.fileno()}", os.O_WRONLY | os.O_DIRECT)
        except OSError:  # no /proc, or a filesystem without direct I/O (tmpfs): EINVAL
            return None

    @property
    def direct(self) -> bool:
        """Whether aligned writes still bypass the page cache."""
        return self._direct_fd is not None

    def __exit__(self, *exception) -> None:
        self._close_direct()

    def write(self, rows: np.ndarray, ids=None) -> None:
        rows = self._checked(rows, ids)
        data = memoryview(rows).cast("B")
        offset = self.data_start + self.rows * self.row_bytes
        direct = 0
        if (
            self._direct_fd is not None
            and offset % DIRECT_ALIGN == 0
            and rows.ctypes.data % DIRECT_ALIGN == 0
        ):
            direct = len(data) - len(data) % DIRECT_ALIGN
            direct = self._write_direct(data[:direct], offset) if direct else 0
        _write_all(self.handle.fileno(), data[direct:], offset + direct)
        self.rows += len(rows)

    def _write_direct(self, data: memoryview, offset: int) -> int:
        """Write ``data`` at ``offset`` past the page cache; the bytes written (0 where the
        device wants another alignment: direct writes then stop, the rest is buffered)."""
        try:
            _write_all(self._direct_fd, data, offset)
        except OSError as error:
            if error.errno != errno.EINVAL:
                raise
            self._close_direct()
            return 0
        return len(data)

    def close(self) -> None:
        self._close_direct()
        super().close()

    def _close_direct(self) -> None:
        fd, self._direct_fd = self._direct_fd, None
        if fd is not None:
            os.close(fd)


def _write_all(fd: int, data: memoryview, offset: int) -> None:
    while data:
        written = os.pwrite(fd, data, offset)
        data, offset = data[written:], offset + written
