"""Real processes that leave temporary files the way the project's writers name them: one killed
with SIGKILL mid-write (``kill -9``), and one still alive."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

#: Writes each ``{name}`` (``{pid}`` replaced by its own pid; a trailing ``/`` makes a directory
#: holding one file), prints "ready" and sleeps until it is killed.
_WRITER = """
import os, sys, time
from pathlib import Path

directory = Path(sys.argv[1])
for name in sys.argv[2:]:
    path = directory / name.format(pid=os.getpid()).rstrip("/")
    if name.endswith("/"):
        path.mkdir(parents=True)
        (path / "part-0").write_bytes(b"x" * 1000)
    else:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(b"x" * 526_000)
print("ready", flush=True)
time.sleep(600)
"""


@contextmanager
def live_writer(directory: Path, names: Sequence[str]) -> Iterator[int]:
    """A process that wrote ``names`` into ``directory`` and is still running; yields its pid."""
    process = subprocess.Popen(
        [sys.executable, "-c", _WRITER, str(directory), *names],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert process.stdout is not None and process.stdout.readline().strip() == "ready"
        yield process.pid
    finally:
        process.kill()
        process.wait()


def killed_writer(directory: Path, names: Sequence[str]) -> int:
    """Let a process write ``names`` into ``directory``, SIGKILL it and reap it; return its pid."""
    with live_writer(directory, names) as pid:
        pass
    return pid
