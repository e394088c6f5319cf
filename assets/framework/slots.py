"""Machine-wide slots for expensive steps, as advisory file locks under the storage root.

Dagster's ``psp_training`` pool limits concurrent training steps, but with the embedded SQLite
instance two runs that claim the last slot at the same moment can both get it (SQLite has no
``SELECT ... FOR UPDATE``). These ``flock`` slots make the limit hold on one machine whatever
the instance storage: a step takes one of ``limit`` lock files, waits (logging once) while all
are held, and releases it when done, also when the process dies (the kernel drops the lock).
"""

from __future__ import annotations

import fcntl
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path


@contextmanager
def machine_slot(
    directory: Path,
    name: str,
    limit: int,
    *,
    poll_seconds: float = 0.5,
    on_wait: Callable[[str], None] | None = None,
) -> Iterator[int]:
    """Hold one of ``limit`` slots called ``name`` (files ``directory/name.<i>.lock``); yields
    the slot number."""
    if limit < 1:
        raise ValueError(f"{name}: the slot limit must be >= 1, got {limit}")
    directory.mkdir(parents=True, exist_ok=True)
    announced = False
    while True:
        for slot in range(limit):
            handle = open(directory / f"{name}.{slot}.lock", "a")  # noqa: SIM115 (held below)
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                handle.close()
                continue
            try:
                yield slot
            finally:
                fcntl.flock(handle, fcntl.LOCK_UN)
                handle.close()
            return
        if not announced and on_wait is not None:
            on_wait(f"all {limit} {name} slot(s) under {directory} are busy; waiting")
            announced = True
        time.sleep(poll_seconds)
