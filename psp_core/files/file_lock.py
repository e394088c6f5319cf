"""An exclusive advisory lock (``flock``) on a lock file that is removed after use.

Holders remove the lock file when they release it, so no lock files pile up beside the data; a
waiter that then gets the lock of the removed file opens the path again and locks the new one,
so two holders never overlap. The kernel drops the lock of a process that dies (``kill -9``).
Works between processes and between threads (each call opens the file itself); on one machine,
or on a shared filesystem whose ``flock`` works across machines. With ``wait=False`` a held lock
raises :class:`LockHeld` at once instead of waiting.
"""

from __future__ import annotations

import fcntl
import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path


class LockHeld(Exception):
    """Another holder has the lock (from :func:`exclusive_lock` with ``wait=False``)."""


@contextmanager
def exclusive_lock(
    path: str | Path, on_wait: Callable[[], None] | None = None, *, wait: bool = True
) -> Iterator[None]:
    """Hold the lock of ``path`` (created if needed); ``on_wait()`` is called once if another
    holder makes this call wait. ``wait=False``: raise :class:`LockHeld` rather than wait."""
    path = Path(path)
    announced = False
    while True:
        handle = open(path, "a")  # noqa: SIM115 (closed below, or after the yield)
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            if not wait:
                handle.close()
                raise LockHeld(str(path)) from None
            if not announced and on_wait is not None:
                on_wait()
            announced = True
            fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            current = os.stat(path).st_ino
        except FileNotFoundError:
            current = None
        if current == os.fstat(handle.fileno()).st_ino:
            break
        handle.close()  # the holder removed this file meanwhile: lock the path's new file
    try:
        yield
    finally:
        path.unlink(missing_ok=True)
        handle.close()


def remove_stale_lock(path: str | Path) -> bool:
    """Remove the lock file ``path`` if nobody holds it (a holder killed after finishing its
    work but before removing the file leaves one behind); True when it was removed."""
    path = Path(path)
    try:
        handle = open(path)  # noqa: SIM115 (closed below)
    except FileNotFoundError:
        return False
    try:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return False  # held: its holder removes it
        try:
            same = os.stat(path).st_ino == os.fstat(handle.fileno()).st_ino
        except FileNotFoundError:
            return False
        if same:
            path.unlink(missing_ok=True)
        return same
    finally:
        handle.close()
