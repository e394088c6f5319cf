"""Stop a step process whose run worker died.

With the multiprocess executor each step is a child process of the run worker. When the run
worker is killed with ``kill -9`` its children live on: a training step would keep its slot and
its checkpoint directory for hours for a run nobody is watching any more, racing the re-run.
:func:`stop_when_orphaned` watches the parent from a thread and interrupts the step when it is
gone (``KeyboardInterrupt`` in the main thread, so ``finally`` blocks remove temporary files),
then kills it if it has not ended after a grace period. The step's work resumes in the next run
(training from its checkpoint).
"""

from __future__ import annotations

import _thread
import multiprocessing
import os
import signal
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager

GRACE_SECONDS = 30.0


@contextmanager
def stop_when_orphaned(
    report: Callable[[str], None], *, grace_seconds: float = GRACE_SECONDS
) -> Iterator[None]:
    """Interrupt this process if its ``multiprocessing`` parent dies while the block runs.

    A no-op outside a ``multiprocessing`` child (the in-process executor, a plain script).
    """
    parent = multiprocessing.parent_process()
    if parent is None:
        yield
        return
    done = threading.Event()

    def watch() -> None:
        while not done.is_set():
            parent.join(timeout=1.0)
            if done.is_set() or parent.is_alive():
                continue
            report(
                f"the run worker (pid {parent.pid}) is gone: stopping this step "
                f"(pid {os.getpid()}); the next run resumes its work"
            )
            _thread.interrupt_main()
            if not done.wait(grace_seconds):
                os.kill(os.getpid(), signal.SIGKILL)
            return

    thread = threading.Thread(target=watch, name="psp-orphan-guard", daemon=True)
    thread.start()
    try:
        yield
    finally:
        done.set()
