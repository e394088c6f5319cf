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
    # fork where the platform has it: workers start at once and need no importable __main__
    # (spawn re-imports the caller's script). The pool forks when it is created, before the
    # first item is read, while the caller's other threads (Arrow's, a background writer) are
    # idle; workers use Arrow only on the arrays they are sent, with single-threaded kernels
    methods = multiprocessing.get_all_start_methods()
    context = multiprocessing.get_context("fork" if "fork" in methods else "spawn")
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


def _start_worker(initializer: Callable[..., None] | None, initargs: tuple) -> None:
    """Give a worker the default SIGTERM, then run the caller's initializer.

    Leaving the pool's ``with`` block terminates it, and a worker still waiting for a task
    may then be blocked on the task queue's lock, which the terminating parent holds: only
    SIGTERM ends it. A forked worker inherits the parent's Python signal handlers, and a
    handler that records the signal instead of exiting (Dagster's interrupt capture, for one)
    would leave that worker, and so the parent's join, waiting forever.
    """
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    if initializer is not None:
        initializer(*initargs)
