"""``.npy`` outputs written past the page cache: the same array as ``np.save`` whatever the
alignment of the rows, the buffers and the calls, with the page cache as the fallback."""

from __future__ import annotations

import errno
import fcntl
import os

import numpy as np
import pytest

import psp_core.files.direct_writes as direct_writes
from psp_core.files.direct_writes import DIRECT_ALIGN, DirectNpyWriter
from psp_core.files.output_files import replaced_when_done
from psp_core.inference.fast.prefaulted_arrays import page_aligned_float32
from tests.psp_core.filesystems import listing


def supports_direct_io(folder) -> bool:
    probe = folder / "direct-probe"
    try:
        fd = os.open(probe, os.O_WRONLY | os.O_CREAT | getattr(os, "O_DIRECT", 0))
    except OSError:
        return False
    os.close(fd)
    probe.unlink()
    return hasattr(os, "O_DIRECT")


def fd_is_direct(fd: int) -> bool:
    return bool(fcntl.fcntl(fd, fcntl.F_GETFL) & getattr(os, "O_DIRECT", 0))


@pytest.fixture()
def recorded_writes(monkeypatch):
    """Every pwrite of the writer: (whether past the page cache, bytes, offset)."""
    calls = []
    real = os.pwrite

    def pwrite(fd, data, offset):
        calls.append((fd_is_direct(fd), len(data), offset))
        return real(fd, data, offset)

    monkeypatch.setattr(direct_writes.os, "pwrite", pwrite)
    return calls


def write_in_chunks(path, array, chunk, aligned_buffer: bool) -> DirectNpyWriter:
    with replaced_when_done(path) as handle:
        writer = DirectNpyWriter(handle, array.shape)
        with writer:
            buffer = page_aligned_float32((chunk, array.shape[1]))
            for start in range(0, len(array), chunk):
                rows = array[start : start + chunk]
                if aligned_buffer:
                    buffer[: len(rows)] = rows
                    rows = buffer[: len(rows)]
                else:  # (rows 4 bytes past a page boundary: never aligned, not by chance)
                    shifted = page_aligned_float32((1, len(rows) * rows.shape[1] + 1))[0, 1:]
                    shifted[:] = rows.ravel()
                    rows = shifted.reshape(rows.shape)
                writer.write(rows)
            writer.close()
    return writer


@pytest.mark.parametrize(
    ("rows", "dim", "chunk"),
    [(5000, 1024, 1024), (5003, 1024, 1000), (3001, 64, 512), (997, 300, 128), (7, 3, 2)],
)
@pytest.mark.parametrize("aligned_buffer", [True, False])
def test_the_array_np_save_writes(tmp_path, recorded_writes, rows, dim, chunk, aligned_buffer):
    array = np.random.default_rng(rows).standard_normal((rows, dim), dtype=np.float32)
    path = tmp_path / "vectors.npy"
    write_in_chunks(path, array, chunk, aligned_buffer)
    loaded = np.load(path)
    assert loaded.dtype == np.float32 and np.array_equal(loaded, array)
    assert np.load(path, mmap_mode="r").offset == DIRECT_ALIGN  # rows start on a block
    direct = [(n, offset) for is_direct, n, offset in recorded_writes if is_direct]
    whole_chunks = (chunk * dim * 4) % DIRECT_ALIGN == 0
    if aligned_buffer and whole_chunks and supports_direct_io(tmp_path):
        # every whole block of the rows went past the page cache, the rest through it
        assert sum(n for n, _ in direct) == rows * dim * 4 - (rows * dim * 4) % DIRECT_ALIGN
        assert all(n % DIRECT_ALIGN == 0 == offset % DIRECT_ALIGN for n, offset in direct)
    if not aligned_buffer:
        assert direct == []


def test_rows_of_another_type_are_written_as_float32(tmp_path) -> None:
    array = np.random.default_rng(5).standard_normal((300, 64), dtype=np.float32)
    path = tmp_path / "vectors.npy"
    with replaced_when_done(path) as handle:
        with DirectNpyWriter(handle, array.shape) as writer:
            for start in range(0, len(array), 128):
                writer.write(array[start : start + 128].astype(np.float64))
            writer.close()
    loaded = np.load(path)
    assert loaded.dtype == np.float32 and np.array_equal(loaded, array)


def test_a_device_that_refuses_the_alignment_falls_back_to_the_page_cache(tmp_path, monkeypatch):
    if not supports_direct_io(tmp_path):
        pytest.skip("this filesystem has no direct I/O")
    real = os.pwrite
    refused = []

    def pwrite(fd, data, offset):
        if fd_is_direct(fd):
            refused.append(fd)
            raise OSError(errno.EINVAL, "Invalid argument")
        return real(fd, data, offset)

    monkeypatch.setattr(direct_writes.os, "pwrite", pwrite)
    array = np.random.default_rng(1).standard_normal((3000, 1024), dtype=np.float32)
    writer = write_in_chunks(tmp_path / "vectors.npy", array, 1024, aligned_buffer=True)
    assert len(refused) == 1 and not writer.direct  # tried once, then buffered
    assert np.array_equal(np.load(tmp_path / "vectors.npy"), array)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["vectors.npy"]


def test_unreserved_space_is_written_through_the_page_cache(tmp_path, monkeypatch):
    """Where the space cannot be allocated up front, nothing is written directly (a direct write
    into a file's holes would allocate blocks as it goes)."""
    monkeypatch.setattr("psp_core.files.output_files.reserve_space", lambda handle, size: False)
    array = np.ones((100, 1024), dtype=np.float32)
    writer = write_in_chunks(tmp_path / "vectors.npy", array, 50, aligned_buffer=True)
    assert not writer.direct
    assert np.array_equal(np.load(tmp_path / "vectors.npy"), array)


def test_a_failed_write_leaves_nothing_and_closes_the_direct_file(tmp_path):
    if not supports_direct_io(tmp_path):
        pytest.skip("this filesystem has no direct I/O")
    with pytest.raises(ValueError, match="announced"):
        with replaced_when_done(tmp_path / "vectors.npy") as handle:
            with DirectNpyWriter(handle, (4, 1024)) as writer:
                direct_fd = writer._direct_fd
                assert fd_is_direct(direct_fd)
                writer.write(page_aligned_float32((2, 1024)))
                writer.close()
    assert listing(tmp_path) == []
    with pytest.raises(OSError) as closed:
        os.fstat(direct_fd)
    assert closed.value.errno == errno.EBADF
