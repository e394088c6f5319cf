"""Run a CPU-bound function over a stream of chunks in worker processes, in input order.

Used by the preparation stages whose work is pure Python or holds the GIL (fastText's
``predict``, jieba): ``workers`` processes each get one chunk at a time, at most
``2 * workers`` chunks are in flight (bounded memory), and results come back in input order.
With ``workers <= 1`` everything runs in the calling process, without a pool.
"""

from __future__ import annotations

import multiprocessing
import signal
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from typing import Any, TypeVar

Item = TypeVar("Item")
Result = TypeVar("Result")


def ordered_map(
    function: Callable[[Any], Result],
    items: Iterable[Item],
    *,
    payload: Callable[[Item], Any],
    workers: int = 1,
    initializer: Callable[..., None] | None = None,
    initargs: tuple = (),
) -> Iterator[tuple[Item, Result]]:
    """Yield ``(item, function(payload(item)))`` for each item, in input order.

    ``function`` and ``initializer`` must be module-level (picklable) functions; ``payload``
    runs in the calling process and turns an item into what is sent to a worker, so items
    themselves (Arrow batches, say) never cross the process boundary. ``initializer(*initargs)``
    runs once per worker (or once in this process when ``workers <= 1``).
    """
    if workers <= 1:
        if initializer is not None:
            initializer(*initargs)
        for item in items:
            yield item, function(payload(item))
        return
    context = _pool_context(function)
    with context.Pool(workers, initializer=_start_worker, initargs=(initializer, initargs)) as pool:
        pending: deque = deque()
        for item in items:
            pending.append((item, pool.apply_async(function, (payload(item),))))
            if len(pending) >= 2 * workers:
                done, result = pending.popleft()
                yield done, result.get()
        while pending:
            done, result = pending.popleft()
            yield done, result.get()


def _pool_context(function: Callable[..., Any]) -> multiprocessing.context.BaseContext:
    """Workers come from a fork server where the platform has one, else they are spawned.

    Not plain ``fork``: the caller is multi-threaded (Arrow's pools, a background writer,
    Dagster's threads), and a child forked while another thread holds a lock (malloc's, the
    logging module's, an import lock) waits on it for ever (a hang on a futex right after the
    fork). The fork server is a fresh single-threaded process;
    it imports ``function``'s module once (when this process starts its server) so that each
    worker forks with it already imported, instead of importing it itself.
    """
    if "forkserver" not in multiprocessing.get_all_start_methods():
        return multiprocessing.get_context("spawn")
    context = multiprocessing.get_context("forkserver")
    # takes effect only before this process's fork server starts; later pools whose
    # function lives elsewhere have their workers import its module themselves
    context.set_forkserver_preload([function.__module__])
    return context


def _start_worker(initializer: Callable[..., None] | None, initargs: tuple) -> None:
    """Give a worker the default SIGTERM, then run the caller's initializer.

    Leaving the pool's ``with`` block terminates it, and a worker still waiting for a task
    may then be blocked on the task queue's lock, which the terminating parent holds: only
    SIGTERM ends it. A worker that inherited a Python handler that records the signal instead
    of exiting (Dagster's interrupt capture, for one) would leave that worker, and so the
    parent's join, waiting forever.
    """
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    if initializer is not None:
        initializer(*initargs)
