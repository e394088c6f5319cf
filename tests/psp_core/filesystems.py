"""Filesystem fixtures of the output tests: a real, tiny filesystem for disk-full tests (a tmpfs
mounted under the test's directory), and outputs that are not regular files: character devices
and FIFOs made in the test's own folder.

Mounting and making device nodes need root (or CAP_SYS_ADMIN, CAP_MKNOD); elsewhere the tests
that need them are skipped with a message, and the simulated faults (``RLIMIT_FSIZE``,
``/dev/full``) still run.
"""

from __future__ import annotations

import errno
import os
import select
import stat
import subprocess
import threading
import tty
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


#: the device numbers of Linux's /dev/null (takes every write) and /dev/full (ENOSPC on write)
NULL_DEVICE = os.makedev(1, 3)
FULL_DEVICE = os.makedev(1, 7)


def character_device(path: Path, device: int = NULL_DEVICE) -> Path:
    """A character device node at ``path`` (the test's own, never the machine's /dev), with the
    numbers of ``device``; skips where nodes cannot be made or opened (no root, a nodev mount)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        os.mknod(path, stat.S_IFCHR | 0o666, device)
    except PermissionError:
        pytest.skip("making a device node needs root (CAP_MKNOD)")
    try:
        os.close(os.open(path, os.O_WRONLY))
    except PermissionError:
        pytest.skip(f"device nodes cannot be opened under {path.parent} (mounted nodev)")
    return path


def is_device(path: Path, device: int = NULL_DEVICE) -> bool:
    """Whether ``path`` itself (not a link) is still the character device ``device``."""
    status = path.lstat()
    return stat.S_ISCHR(status.st_mode) and status.st_rdev == device


@contextmanager
def drained_fifo(path: Path) -> Iterator[bytearray]:
    """A FIFO at ``path`` whose bytes a thread reads into the yielded buffer while the block runs
    (complete when it ends). The test holds the FIFO open for reading and writing, so a writer's
    open never blocks and an output that replaced the FIFO leaves the test waiting on nothing."""
    path.parent.mkdir(parents=True, exist_ok=True)
    os.mkfifo(path)
    fd = os.open(path, os.O_RDWR | os.O_NONBLOCK)
    try:
        with _drained(fd) as received:
            yield received
    finally:
        os.close(fd)


@contextmanager
def drained_terminal() -> Iterator[tuple[Path, bytearray]]:
    """A character device whose bytes can be read back: a pseudo-terminal in raw mode (no line
    discipline: every byte passes as written). Yields the device's path and the buffer a thread
    reads what is written to it into, complete when the block ends. The test keeps the device
    itself open, so a writer closing it never hangs the reader up."""
    controller, device = os.openpty()
    try:
        tty.setraw(device)
        os.set_blocking(controller, False)
        with _drained(controller) as received:
            yield Path(os.ttyname(device)), received
    finally:
        os.close(controller)
        os.close(device)


@contextmanager
def _drained(fd: int) -> Iterator[bytearray]:
    """Read the non-blocking ``fd`` into the yielded buffer on a thread while the block runs.

    While the block runs the thread reads what arrives (a writer of more than the pipe holds
    needs a reader); once it has ended, the thread reads what is left until nothing is. Every
    byte the block wrote is there by then, so none is missed: stopping at the first empty wait
    after the block ended instead lost a write that landed between that wait and the check
    (the block's thread holding the interpreter while the reader waited for it)."""
    received = bytearray()
    failures: list[BaseException] = []
    done = threading.Event()
    poller = select.poll()
    poller.register(fd, select.POLLIN)

    def read_what_is_there() -> None:
        while True:
            try:
                chunk = os.read(fd, 1 << 16)
            except BlockingIOError:
                return  # empty: the test's own other end keeps it from ever reading EOF
            received.extend(chunk)

    def drain() -> None:
        try:
            while not done.is_set():
                if poller.poll(10):
                    read_what_is_there()
            read_what_is_there()
        except BaseException as error:  # reported by the test's thread, below
            failures.append(error)

    reader = threading.Thread(target=drain, name="output-reader", daemon=True)
    reader.start()
    try:
        yield received
    finally:
        done.set()
        reader.join(timeout=60)
    assert not reader.is_alive(), "the output's reader did not stop"
    if failures:
        raise failures[0]


def is_fifo(path: Path) -> bool:
    return stat.S_ISFIFO(path.lstat().st_mode)
