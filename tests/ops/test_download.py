"""download(): streaming, resume with Range, retries, length and zip checks, cache, errors.

Every test talks to a real loopback HTTP server (tests/ops/opus_server.py) through requests.
"""

from __future__ import annotations

import fcntl
import io
import random
import re
import threading
import zipfile
from pathlib import Path

import pytest

from psp_core.files.download import (
    DownloadError,
    download,
    lock_path,
    partial_path,
    verify_zip,
    verify_zip_full,
)
from tests.ops.opus_server import Fault, OpusServer, build_moses_zip

FAST = {"backoff": 0.001, "timeout": 10}


def random_bytes(n: int, seed: int = 0) -> bytes:
    return random.Random(seed).randbytes(n)


def sample_zip(n_lines: int = 2000) -> bytes:
    rng = random.Random(3)
    english = [f"line {i} {rng.random()}" for i in range(n_lines)]
    return build_moses_zip("Demo", "en", "de", english, [f"Zeile {s}" for s in english])


def test_download_streams_to_cache_and_cache_hit_makes_no_request(
    opus_server: OpusServer, tmp_path: Path
) -> None:
    data = random_bytes(300_000)
    url = opus_server.add_file("/files/blob.bin", data)
    dest = tmp_path / "cache" / "blob.bin"
    assert download(url, dest, **FAST) == dest
    assert dest.read_bytes() == data
    assert not partial_path(dest).exists()
    assert opus_server.count() == 1
    assert download(url, dest, **FAST) == dest
    assert opus_server.count() == 1 and opus_server.count(method="HEAD") == 0


def test_a_lock_left_by_a_process_killed_after_its_download_is_removed_on_the_cache_hit(
    opus_server: OpusServer, tmp_path: Path
) -> None:
    # killed between renaming the finished file and removing its lock file: the next run
    # finds the file in the cache and must not leave the lock file there for ever
    url = opus_server.add_file("/files/blob.bin", random_bytes(1000))
    dest = tmp_path / "cache" / "blob.bin"
    download(url, dest, **FAST)
    lock = lock_path(dest)
    lock.touch()
    assert download(url, dest, **FAST) == dest
    assert not lock.exists() and opus_server.count() == 1
    # a lock somebody holds stays (its holder removes it)
    lock.touch()
    with open(lock) as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        assert download(url, dest, **FAST) == dest
        assert lock.exists()


@pytest.mark.parametrize(
    ("faults", "expected_ranges"),
    [
        ([Fault(drop_after=20_000)], [None, "bytes=20000-"]),
        (
            [Fault(drop_after=15_000), Fault(drop_after=10_000)],
            [None, "bytes=15000-", "bytes=25000-"],
        ),
        ([Fault(status=500, times=2)], [None, None, None]),
        ([Fault(status=503), Fault(drop_after=10)], [None, None, "bytes=10-"]),
    ],
    ids=["drop-once", "drop-twice", "500-500-ok", "503-then-drop"],
)
def test_faults_are_retried_and_resumed_byte_identical(
    opus_server: OpusServer, tmp_path: Path, faults: list[Fault], expected_ranges: list
) -> None:
    data = sample_zip()
    assert len(data) > 30_000
    url = opus_server.add_file("/files/corpus.zip", data)
    opus_server.fail("/files/corpus.zip", *faults)
    dest = download(url, tmp_path / "corpus.zip", retries=3, **FAST)
    assert dest.read_bytes() == data
    assert opus_server.ranges("/files/corpus.zip") == expected_ranges


def test_resume_continues_a_partial_left_by_a_killed_process(
    opus_server: OpusServer, tmp_path: Path
) -> None:
    data = random_bytes(200_000, seed=1)
    url = opus_server.add_file("/files/blob.bin", data)
    dest = tmp_path / "blob.bin"
    partial_path(dest).write_bytes(data[:123_456])
    download(url, dest, **FAST)
    assert dest.read_bytes() == data
    assert opus_server.ranges("/files/blob.bin") == ["bytes=123456-"]


def test_complete_partial_is_finished_without_a_body(
    opus_server: OpusServer, tmp_path: Path
) -> None:
    data = sample_zip(50)
    url = opus_server.add_file("/files/done.zip", data)
    dest = tmp_path / "done.zip"
    partial_path(dest).write_bytes(data)
    download(url, dest, **FAST)  # the server answers 416 with the total size
    assert dest.read_bytes() == data


def test_server_ignoring_range_restarts_cleanly(opus_server: OpusServer, tmp_path: Path) -> None:
    data = random_bytes(150_000, seed=2)
    url = opus_server.add_file("/files/blob.bin", data)
    dest = tmp_path / "blob.bin"
    partial_path(dest).write_bytes(b"stale bytes from another attempt" * 100)
    opus_server.fail("/files/blob.bin", Fault(ignore_range=True))
    download(url, dest, **FAST)
    assert dest.read_bytes() == data


@pytest.mark.parametrize("crash_between", [False, True], ids=["same-call", "after-crash"])
def test_file_changed_on_server_before_resume_is_fetched_whole(
    opus_server: OpusServer, tmp_path: Path, crash_between: bool
) -> None:
    """If-Range carries the ETag that started the partial: a changed file comes back whole."""
    old, new = random_bytes(100_000, seed=3), random_bytes(120_000, seed=4)
    url = opus_server.add_file("/files/blob.bin", old)
    dest = tmp_path / "blob.bin"
    opus_server.fail("/files/blob.bin", Fault(drop_after=60_000))
    if crash_between:
        with pytest.raises(DownloadError):
            download(url, dest, retries=0, **FAST)
        assert partial_path(dest).stat().st_size == 60_000
        opus_server.files["/files/blob.bin"] = new
    else:
        original_next_fault = opus_server._next_fault

        def replace_file_after_first_request(path: str) -> Fault | None:
            fault = original_next_fault(path)
            if fault is None:
                opus_server.files[path] = new
            return fault

        opus_server._next_fault = replace_file_after_first_request
    download(url, dest, **FAST)
    assert dest.read_bytes() == new
    assert opus_server.ranges("/files/blob.bin") == [None, "bytes=60000-"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["blob.bin"]


@pytest.mark.parametrize(
    ("fault", "message", "expected_requests"),
    [
        (Fault(status=404, times=99), "HTTP 404", 1),
        (Fault(status=403, times=99), "HTTP 403", 1),
        (Fault(status=503, times=99), "HTTP 503", 3),
        (Fault(drop_after=0, times=99), "failed after 2 retries", 3),
    ],
    ids=["404", "403", "503-forever", "drop-forever"],
)
def test_unrecoverable_answers_raise_clear_errors_and_cache_nothing(
    opus_server: OpusServer, tmp_path: Path, fault: Fault, message: str, expected_requests: int
) -> None:
    url = opus_server.add_file("/files/corpus.zip", sample_zip(50))
    opus_server.fail("/files/corpus.zip", fault)
    dest = tmp_path / "corpus.zip"
    with pytest.raises(DownloadError, match=message) as caught:
        download(url, dest, retries=2, **FAST)
    assert url in str(caught.value)
    assert not dest.exists()
    assert opus_server.count("/files/corpus.zip") == expected_requests


def test_truncated_zip_is_detected_and_not_cached(opus_server: OpusServer, tmp_path: Path) -> None:
    data = sample_zip()
    url = opus_server.add_file("/files/corpus.zip", data)
    opus_server.fail("/files/corpus.zip", Fault(truncate_to=len(data) // 2, times=99))
    dest = tmp_path / "corpus.zip"
    with pytest.raises(DownloadError, match="not a complete zip"):
        download(url, dest, **FAST)
    assert list(tmp_path.iterdir()) == []


def test_unknown_host_is_a_download_error(tmp_path: Path) -> None:
    with pytest.raises(DownloadError, match="127.0.0.1:9"):
        download("http://127.0.0.1:9/nothing.zip", tmp_path / "x.zip", retries=1, **FAST)
    assert list(tmp_path.iterdir()) == []


def _stored_zip(payload: bytes) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_STORED) as archive:
        archive.writestr("data.txt", payload)
    return buffer.getvalue()


@pytest.mark.parametrize(
    ("mutate", "quick_ok", "full_ok"),
    [
        (lambda z: z, True, True),
        (lambda z: z.replace(b"payload-42", b"payload-43"), True, False),  # CRC mismatch
        (lambda z: z[: len(z) - 30], False, False),  # end of central directory cut off
        (lambda z: b"not a zip at all", False, False),
    ],
    ids=["intact", "crc", "truncated", "garbage"],
)
def test_zip_verification(tmp_path: Path, mutate, quick_ok: bool, full_ok: bool) -> None:
    path = tmp_path / "a.zip"
    path.write_bytes(mutate(_stored_zip(b"".join(b"payload-%d\n" % i for i in range(100)))))
    for check, ok in ((verify_zip, quick_ok), (verify_zip_full, full_ok)):
        if ok:
            check(path)
        else:
            with pytest.raises(DownloadError, match=str(path)):
                check(path)


def test_concurrent_downloads_of_one_file_take_turns(
    opus_server: OpusServer, tmp_path: Path
) -> None:
    """Two downloaders of one dest at once: one transfer, the other waits for it (each thread
    opens the lock file itself, so they exclude each other as two processes would)."""
    data = sample_zip(20_000)
    url = opus_server.add_file("/slow.zip", data)
    opus_server.fail("/slow.zip", Fault(pause=1.0, times=2))
    dest = tmp_path / "cache" / "slow.zip"
    results: list[Path | BaseException] = []

    def fetch() -> None:
        try:
            results.append(download(url, dest, **FAST))
        except BaseException as err:  # noqa: BLE001 (reported below)
            results.append(err)

    threads = [threading.Thread(target=fetch) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert results == [dest, dest]
    assert dest.read_bytes() == data
    assert opus_server.count("/slow.zip") == 1
    assert not partial_path(dest).exists()


def test_a_download_logs_its_progress(
    opus_server: OpusServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog
) -> None:
    """Every PROGRESS_SECONDS (30 s; 0 here, so every chunk) a line with MB received of the
    total, the share, the rate and the time left."""
    import psp_core.files.download

    monkeypatch.setattr(psp_core.files.download, "PROGRESS_SECONDS", 0.0)
    url = opus_server.add_file("/files/big.bin", random_bytes(3 << 20))
    with caplog.at_level("INFO", logger="psp_core.files.download"):
        download(url, tmp_path / "big.bin", **FAST)
    lines = [r.getMessage() for r in caplog.records if "MB/s" in r.getMessage()]
    assert lines, [r.getMessage() for r in caplog.records]
    assert re.fullmatch(
        rf"download {re.escape(url)}: [\d.]+ / 3\.0 MB \(\d+%\), [\d.]+ MB/s, eta \S+", lines[0]
    )
    assert "3.0 / 3.0 MB (100%)" in lines[-1]
