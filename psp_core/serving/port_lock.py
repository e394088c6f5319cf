"""One ``psp serve`` per port on a machine: a lock file per port, held for the server's life.

Workers share their port with ``SO_REUSEPORT``, so the kernel would let a second ``psp serve
--workers`` bind the same port and split the requests between two sets of models; a port
another program holds is found by binding, but two servers starting at the same instant both
find it free. The lock (``flock`` on ``$TMPDIR/psp-serve-PORT.lock``) is taken before the port
is checked and kept until the server ends; the kernel drops it when the process dies, ``kill
-9`` included. The file names the holder's pid, for the message.
"""

from __future__ import annotations

import fcntl
import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


def lock_path(port: int) -> Path:
    return Path(tempfile.gettempdir()) / f"psp-serve-{port}.lock"


@contextmanager
def port_lock(port: int) -> Iterator[None]:
    """Hold ``port``'s lock for the block.

    Raises:
        ValueError: another ``psp serve`` holds it (the message names its pid).
    """
    path = lock_path(port)
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o666)
    except PermissionError:  # another user's lock file: locking it read-only still works
        fd = os.open(path, os.O_RDONLY)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 32, 0).decode("ascii", "replace").strip() or "?"
            raise ValueError(
                f"port {port} is already served by another psp serve (pid {holder}); stop it, "
                "or give --port another number"
            ) from None
        try:
            os.ftruncate(fd, 0)
            os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        except OSError:  # (read-only: the message will say "pid ?")
            pass
        yield
    finally:
        os.close(fd)  # (the lock goes with it; the file stays, reused by the next server)
