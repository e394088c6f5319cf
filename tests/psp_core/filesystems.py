"""A real, tiny filesystem for disk-full tests: a tmpfs mounted under the test's directory.

Mounting needs root (or CAP_SYS_ADMIN); elsewhere the tests that need it are skipped with a
message, and the simulated faults (``RLIMIT_FSIZE``, ``/dev/full``) still run.
"""

from __future__ import annotations

import errno
import os
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest


@contextmanager
def tiny_tmpfs(mountpoint: Path, size_kib: int = 64, *, read_only: bool = False) -> Iterator[Path]:
    """Mount a ``size_kib`` tmpfs at ``mountpoint`` for the ``with`` block (skip if not allowed)."""
    mountpoint.mkdir(parents=True, exist_ok=True)
    if os.geteuid() != 0:
        pytest.skip("mounting a tiny tmpfs needs root; the simulated disk-full tests still run")
    options = f"size={size_kib}k" + (",ro" if read_only else "")
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(mountpoint)],
        capture_output=True,
        text=True,
    )
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here ({mounted.stderr.strip()})")
    try:
        yield mountpoint
    finally:
        subprocess.run(["umount", "-l", str(mountpoint)], check=True)


@contextmanager
def read_only_directory(path: Path) -> Iterator[Path]:
    """A directory nobody may write in: mode 0555, or for root (whom modes do not stop) a
    read-only tmpfs."""
    if os.geteuid() == 0:
        with tiny_tmpfs(path, read_only=True) as mounted:
            yield mounted
        return
    path.mkdir(parents=True, exist_ok=True)
    path.chmod(0o555)
    try:
        yield path
    finally:
        path.chmod(0o755)


def fill_up(directory: Path) -> Path:
    """Write one file in ``directory`` until its filesystem reports ENOSPC; returns the file."""
    filler = directory / "filler"
    with open(filler, "wb", buffering=0) as handle:
        try:
            while True:
                handle.write(b"\0" * 4096)
        except OSError as error:
            if error.errno != errno.ENOSPC:
                raise
    return filler


def listing(directory: Path) -> list[str]:
    """The names in ``directory`` (sorted), hidden temporaries included."""
    return sorted(p.name for p in directory.iterdir())
