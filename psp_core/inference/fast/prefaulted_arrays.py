"""Large output arrays whose memory is mapped up front, not page by page on first write.

``embed`` writes its vectors into a new array: 1 GB for 250,000 sentences at dim 1024. numpy
asks Linux for transparent huge pages on large arrays (``madvise(MADV_HUGEPAGE)``), and where
the kernel's ``defrag`` setting is ``madvise`` (its default) the first write to each 2 MB then
compacts memory on the spot when no free huge page is at hand. The first touch of a large
array in a fresh process then takes longer, and varies far more, than the same memory mapped
whole by the kernel (``MAP_POPULATE``, no huge-page advice; benchmarks/RESULTS.md#embed-corpus),
and a first pass over a corpus pays it once per call, on the critical path.

:func:`fresh_float32` returns such an array (a private anonymous mapping, as ``np.empty``'s
own memory is: a forked child gets a copy-on-write view) for outputs of at least
:data:`POPULATE_BYTES`, and a plain ``np.empty`` below that or off Linux.
:func:`page_aligned_float32` maps the same kind of memory without populating it, for buffers
that must start on a page.
"""

from __future__ import annotations

import mmap
import sys

import numpy as np

#: outputs from this size are mapped whole (smaller ones: numpy's own allocation)
POPULATE_BYTES = 64 << 20


def fresh_float32(shape: tuple[int, int]) -> np.ndarray:
    """A new, writable, C-contiguous float32 array of ``shape`` (its values unspecified)."""
    rows, columns = shape
    size = rows * columns * 4
    populate = getattr(mmap, "MAP_POPULATE", None)
    if size < POPULATE_BYTES or populate is None or not sys.platform.startswith("linux"):
        return np.empty(shape, dtype=np.float32)
    return _mapped_float32(shape, mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS | populate)


def page_aligned_float32(shape: tuple[int, int]) -> np.ndarray:
    """A new float32 array of ``shape`` whose data starts on a page (anonymous memory, its pages
    mapped on first write): a buffer that direct I/O can write from
    (:mod:`psp_core.files.direct_writes`)."""
    private = getattr(mmap, "MAP_PRIVATE", None)  # (as np.empty's: a forked child's is a copy)
    return _mapped_float32(shape, None if private is None else private | mmap.MAP_ANONYMOUS)


def _mapped_float32(shape: tuple[int, int], flags: int | None) -> np.ndarray:
    count = shape[0] * shape[1]
    size = max(count * 4, 1)  # (a mapping is never empty)
    memory = mmap.mmap(-1, size) if flags is None else mmap.mmap(-1, size, flags=flags)
    return np.frombuffer(memory, dtype=np.float32, count=count).reshape(shape)
