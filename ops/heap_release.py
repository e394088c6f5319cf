"""Handing the heap memory a finished stage freed back to the operating system.

Freed memory is not returned to the OS by default: Arrow's allocator (mimalloc or jemalloc)
keeps freed pages for reuse, and glibc's ``malloc`` keeps freed chunks inside its heap. The
preparation chain runs its stages one after the other in one process, so each stage would
start with the previous stages' high-water mark still resident. That pushes the chain's peak
RSS up: sentencepiece training, which needs hundreds of MiB of its own, would start from the
earlier stages' peak instead of from the process's base (benchmarks/RESULTS.md#prep-speed).

:func:`release_free_memory` returns both allocators' free pages, a cheap call.
"""

from __future__ import annotations

import ctypes
import ctypes.util
from functools import cache

import pyarrow as pa


@cache
def _malloc_trim():
    """glibc's ``malloc_trim``, or None on a C library without it (musl, macOS, Windows)."""
    name = ctypes.util.find_library("c")
    try:
        trim = ctypes.CDLL(name).malloc_trim
    except (OSError, AttributeError, TypeError):
        return None
    trim.argtypes = [ctypes.c_size_t]
    trim.restype = ctypes.c_int
    return trim


def release_free_memory() -> None:
    """Return the free pages of Arrow's memory pool and of the C heap to the OS."""
    pa.default_memory_pool().release_unused()
    trim = _malloc_trim()
    if trim is not None:
        trim(0)
