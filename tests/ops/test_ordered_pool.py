import os
import signal
import threading

from ops.ordered_pool import ordered_map


def _square_with_pid(x: int) -> tuple[int, int]:
    return x * x, os.getpid()


def _sigterm_is_default(_: int) -> bool:
    return signal.getsignal(signal.SIGTERM) == signal.SIG_DFL


def test_results_come_back_in_input_order_from_worker_processes() -> None:
    results = list(ordered_map(_square_with_pid, range(50), payload=lambda x: x, workers=2))
    assert [item for item, _ in results] == list(range(50))
    assert [square for _, (square, _) in results] == [x * x for x in range(50)]
    assert os.getpid() not in {pid for _, (_, pid) in results}


def test_workers_get_the_default_sigterm_even_when_the_parent_catches_it() -> None:
    # a caller such as a Dagster step may record SIGTERM instead of dying of it; workers that
    # inherited that handler could not be terminated when the pool closes, and it would hang
    previous = signal.signal(signal.SIGTERM, lambda signum, frame: None)
    try:
        results = list(ordered_map(_sigterm_is_default, range(8), payload=lambda x: x, workers=2))
    finally:
        signal.signal(signal.SIGTERM, previous)
    assert [default for _, default in results] == [True] * 8


# held by another thread of the parent while the pool starts (see the test below)
_parent_lock = threading.Lock()


def _lock_is_free(_: int) -> bool:
    acquired = _parent_lock.acquire(timeout=2)
    if acquired:
        _parent_lock.release()
    return acquired


def test_a_lock_held_by_another_parent_thread_does_not_reach_the_workers() -> None:
    # a process forked from a multi-threaded parent inherits the locks other threads hold, and
    # waits on them for ever (a worker once hung on a futex right after the fork): workers must
    # start from a clean process, whatever the parent's threads are doing
    holding, release = threading.Event(), threading.Event()

    def hold() -> None:
        with _parent_lock:
            holding.set()
            release.wait()

    holder = threading.Thread(target=hold)
    holder.start()
    holding.wait()
    try:
        results = list(ordered_map(_lock_is_free, range(4), payload=lambda x: x, workers=2))
    finally:
        release.set()
        holder.join()
    assert [free for _, free in results] == [True] * 4
