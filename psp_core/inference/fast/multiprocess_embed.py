"""Embedding a large input with several processes: every core, where threads could not.

A second thread (``num_threads=2``: sentencepiece's and torch's) gains less on a first pass
over a corpus than a second process embedding half of it (benchmarks/RESULTS.md#embed-corpus):
between its native calls each block holds Python (lists of ids, numpy bookkeeping), so one
process keeps about one core busy.

:func:`embed_forked` splits the input into contiguous shares, one per worker. The calling
process embeds the first share itself; each other share is embedded by a child made with
``os.fork`` (Linux): the child starts with the model, its word cache and the sentences already
in memory (copy-on-write: nothing is loaded or pickled), embeds its share on one thread, and
exits. What a child adds to its word cache dies with it.

Where the children write: a memory file (``memfd_create``) that each child maps shared. For a
new output, the parent maps that file *privately* over the output's tail (the output's head,
the parent's own share, is ordinary anonymous memory): the children's rows reach the caller
without a copy, and the array behaves as private memory (a later fork of the caller's gets it
copy-on-write, as with ``np.empty``). Into a caller's ``out``, the parent copies the rows.

Failure handling: a child that fails exits non-zero (its traceback on stderr) and the parent
raises :class:`WorkerFailed`; a parent interrupted (Ctrl-C, an exception) kills and reaps its
children before the error propagates; a child dies with its parent (``PR_SET_PDEATHSIG``), so
a parent killed with ``kill -9`` leaves nothing running.

Progress: each child counts its embedded sentences in a shared counter and the parent reports
them with its own, so a progress bar moves at the speed of all workers.
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import math
import mmap
import os
import signal
import sys
import threading
import time
import traceback
from collections.abc import Callable, Sequence

import numpy as np

from psp_core.inference.fast.pooling import set_threads
from psp_core.inference.fast.prefaulted_arrays import fresh_float32

#: the least sentences worth a process of their own: below this a fork and its copy-on-write
#: faults (a few ms) are a visible share of the work
MIN_SENTENCES_PER_WORKER = 16_384

_PARENT_EXTRA = 0.04
_POLL_SECONDS = 0.005


class WorkerFailed(RuntimeError):
    """An embedding worker process did not finish its share."""


def can_fork() -> bool:
    return sys.platform.startswith("linux") and hasattr(os, "fork") and hasattr(os, "memfd_create")


def workers_for(count: int, workers: int) -> int:
    """How many processes embed ``count`` sentences when ``workers`` are allowed: fewer where
    the shares would be small."""
    if workers <= 1 or not can_fork():
        return 1
    return max(1, min(workers, count // MIN_SENTENCES_PER_WORKER))


EmbedInto = Callable[[Sequence[str], np.ndarray, Callable[[int], None]], None]


def embed_forked(
    sentences: Sequence[str],
    output: np.ndarray | None,
    dim: int,
    workers: int,
    embed_into: EmbedInto,
    progress: Callable[[int], None],
    fork_lock: threading.Lock,
) -> np.ndarray:
    """Embed ``sentences`` into ``output`` (float32 ``[n, dim]``; None: a new array) with
    ``workers`` processes; returns the output.

    ``embed_into(texts, out, done)`` embeds ``texts`` into ``out`` and calls ``done(k)`` after
    each ``k`` sentences; ``progress(k)`` is told of every sentence embedded by any worker.
    ``fork_lock`` is held while forking (the lock that guards the model's word cache: the child
    must not start with it held by another thread of the parent)."""
    count = len(sentences)
    row_bytes = dim * 4
    # the parent's share: a little more than the others' (their rows are shared memory, which
    # takes longer to map than the parent's anonymous memory; benchmarks/RESULTS.md#embed-corpus)
    first = _page_aligned(min(count, round(count * (1 + _PARENT_EXTRA) / workers)), row_bytes)
    bounds = [0] + [first + (count - first) * k // (workers - 1) for k in range(workers)]
    rest_bytes = (count - first) * row_bytes
    rows_file = os.memfd_create("psp-embed-workers", os.MFD_CLOEXEC)
    counters_memory = mmap.mmap(-1, 8 * workers, flags=mmap.MAP_SHARED)
    counters = np.frombuffer(counters_memory, dtype=np.int64)
    children: dict[int, int] = {}  # pid -> worker index
    previous_threads = set_threads(1)  # (one core per process)
    try:
        os.ftruncate(rows_file, rest_bytes)
        for index in range(1, workers):
            pid = _fork(fork_lock, output)
            if pid == 0:
                low, high = bounds[index], bounds[index + 1]
                offset = (low - first) * row_bytes
                _run_child(
                    index,
                    embed_into,
                    sentences[low:high],
                    counters,
                    functools.partial(
                        _rows_of_file, rows_file, rest_bytes, offset, high - low, dim
                    ),
                )
            children[pid] = index
        copy_rest = output is not None  # (a caller's output gets the children's rows copied)
        if output is None:  # (made after the fork: memory written before it is copied on write)
            output = _output_over_file(count, dim, first, rows_file)  # their rows mapped in
            if output is None:  # (the system refused the mapping)
                output, copy_rest = fresh_float32((count, dim)), True
        reported = 0

        def parent_done(k: int) -> None:
            nonlocal reported
            children_done = int(counters[1:].sum())
            progress(k + children_done - reported)
            reported = children_done

        embed_into(sentences[:first], output[:first], parent_done)
        _wait(children, parent_done)
        if copy_rest and count > first:
            output[first:] = _rows_of_file(rows_file, rest_bytes, 0, count - first, dim)
    finally:
        set_threads(previous_threads)
        for pid in children:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
            with contextlib.suppress(ChildProcessError):
                os.waitpid(pid, 0)
        os.close(rows_file)  # (a mapping of it keeps its memory while the output lives)
        counters = None
        with contextlib.suppress(BufferError):
            counters_memory.close()
    return output


def _page_aligned(rows: int, row_bytes: int) -> int:
    """``rows`` rounded down to a count whose bytes are a whole number of pages (the parent's
    share ends where the file's pages begin)."""
    step = mmap.PAGESIZE // math.gcd(row_bytes, mmap.PAGESIZE)
    return rows // step * step


def _rows_of_file(descriptor: int, size: int, offset: int, rows: int, dim: int) -> np.ndarray:
    """``rows`` x ``dim`` float32 at ``offset`` of the memory file, mapped shared (writes reach
    the file)."""
    memory = mmap.mmap(descriptor, size, flags=mmap.MAP_SHARED)
    return np.frombuffer(memory, np.float32, rows * dim, offset).reshape(rows, dim)


def _output_over_file(count: int, dim: int, first: int, descriptor: int) -> np.ndarray | None:
    """A new ``[count, dim]`` float32 array whose first ``first`` rows are anonymous memory
    (mapped up front) and whose other rows are the memory file mapped privately (MAP_FIXED
    over the tail of one anonymous mapping, so that the array is one range, unmapped whole
    with the mapping); None where the system refuses."""
    size = count * dim * 4
    head = first * dim * 4
    memory = mmap.mmap(-1, size, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    output = np.frombuffer(memory, np.float32).reshape(count, dim)
    if size > head:
        libc = _libc()
        address = output.ctypes.data + head
        mapped = libc.mmap(
            ctypes.c_void_p(address),
            ctypes.c_size_t(size - head),
            mmap.PROT_READ | mmap.PROT_WRITE,
            mmap.MAP_PRIVATE | _MAP_FIXED,
            descriptor,
            ctypes.c_long(0),
        )
        if mapped != address:
            return None
    if head:
        _madvise(output.ctypes.data, head, _MADV_POPULATE_WRITE)
    return output


def _fork(lock: threading.Lock, output: np.ndarray | None) -> int:
    """``os.fork`` with ``lock`` held, so that neither side starts with it held by a thread the
    child does not have (each side releases its own copy), and with ``output``'s pages left out
    of the child: the parent is about to write all of them, and each page it shares with a
    child would be copied on its first write."""
    lock.acquire()
    try:
        with _not_inherited(output):
            return os.fork()
    finally:
        lock.release()


@contextlib.contextmanager
def _not_inherited(array: np.ndarray | None):
    """``madvise(MADV_DONTFORK)`` on the whole pages inside ``array`` for the duration (then
    ``MADV_DOFORK``, so that the caller's own forks later inherit the array as before)."""
    span = _whole_pages(array) if array is not None else None
    if span is None or _madvise(*span, _MADV_DONTFORK) != 0:
        yield
        return
    try:
        yield
    finally:  # (in the child too, where the range is not mapped: an error, ignored)
        _madvise(*span, _MADV_DOFORK)


_MAP_FIXED = 0x10
_MADV_DONTFORK = 10
_MADV_DOFORK = 11
_MADV_POPULATE_WRITE = 23  # (Linux 5.14; an error before, ignored: the pages fault in instead)


def _whole_pages(array: np.ndarray) -> tuple[int, int] | None:
    """The address and length of the whole pages inside ``array``'s memory, if any."""
    page = mmap.PAGESIZE
    start = array.ctypes.data
    first = -(-start // page) * page
    last = (start + array.nbytes) // page * page
    return (first, last - first) if last > first else None


@functools.cache
def _libc():
    libc = ctypes.CDLL(None, use_errno=True)
    libc.mmap.restype = ctypes.c_void_p
    libc.mmap.argtypes = [
        ctypes.c_void_p,
        ctypes.c_size_t,
        ctypes.c_int,
        ctypes.c_int,
        ctypes.c_int,
        ctypes.c_long,
    ]
    libc.madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    return libc


def _madvise(address: int, length: int, advice: int) -> int:
    try:
        return _libc().madvise(address, length, advice)
    except OSError:
        return -1


def _run_child(
    index: int,
    embed_into: EmbedInto,
    texts: Sequence[str],
    counters: np.ndarray,
    rows: Callable[[], np.ndarray],
) -> None:
    """The child's whole life: die with the parent, embed its share into ``rows()``, exit
    without running the parent's exit handlers or flushing its buffers."""
    code = 1
    try:
        parent = os.getppid()
        _die_with_parent()
        if os.getppid() != parent:  # (the parent went before the line above took effect)
            os._exit(1)
        set_threads(1)
        out = rows()
        span = _whole_pages(out)
        if span is not None:  # (mapped in one call: faster than a fault per page)
            _madvise(*span, _MADV_POPULATE_WRITE)

        def done(k: int) -> None:
            counters[index] += k

        embed_into(texts, out, done)
        code = 0
    except BaseException:  # noqa: BLE001  (any failure: told through the exit code)
        with contextlib.suppress(Exception):
            sys.stderr.write(f"embedding worker {index} failed:\n{traceback.format_exc()}")
            sys.stderr.flush()
    finally:
        os._exit(code)


def _die_with_parent() -> None:
    with contextlib.suppress(OSError, AttributeError):
        _libc().prctl(1, signal.SIGKILL, 0, 0, 0)  # PR_SET_PDEATHSIG


def _wait(children: dict[int, int], done: Callable[[int], None]) -> None:
    """Reap every child, reporting their progress meanwhile; a child that fails fails the call
    (the others are killed by the caller's cleanup)."""
    while children:
        for pid in list(children):  # (only ours: waiting for any child would reap the caller's)
            reaped, status = os.waitpid(pid, os.WNOHANG)
            if reaped == 0:
                continue
            index = children.pop(pid)
            if not os.WIFEXITED(status) or os.WEXITSTATUS(status) != 0:
                how = (
                    f"was killed by signal {os.WTERMSIG(status)}"
                    if os.WIFSIGNALED(status)
                    else f"exited with status {os.WEXITSTATUS(status)}"
                )
                raise WorkerFailed(f"embedding worker process {index} (pid {pid}) {how}")
        done(0)
        if children:
            time.sleep(_POLL_SECONDS)
