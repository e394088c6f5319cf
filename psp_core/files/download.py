"""Resumable, verified, cached HTTP downloads of large files (corpora, evaluation archives).

``download(url, dest)`` streams the body to ``dest.part`` in 1 MiB chunks (never the whole file
in memory) and renames it to ``dest`` only once it is complete and checked:

* **Cache.** If ``dest`` exists, it is returned without any request (not even a HEAD): files only
  reach that name after the length and zip checks below, so a file there is complete. Delete it
  to force a fresh download.
* **Resume.** A leftover ``dest.part`` (from a dropped connection or a killed process) is
  continued with ``Range: bytes=N-``. ``If-Range`` carries the ETag (or Last-Modified) of the
  answer that started the partial, kept beside it in ``dest.part.validator``, so a file that
  changed on the server meanwhile is sent whole. A server that ignores the range and answers
  ``200`` is restarted cleanly from byte 0.
* **Retries.** Connection errors, read timeouts before the headers and 429/5xx answers are
  retried by urllib3's ``Retry`` adapter with exponential backoff (honouring ``Retry-After``).
  A body that breaks off mid-transfer (connection dropped, incomplete read) is retried by
  ``download`` itself, resuming from the bytes already on disk, with backoff
  ``backoff * 2**k``; the failure count resets whenever an attempt made progress.
* **Checks.** The received length must equal ``Content-Length`` (or the total in
  ``Content-Range``); a ``.zip`` must open and its central directory must describe members that
  lie inside the file (a truncated zip fails here and is deleted, nothing lands in the cache).
  CRCs are checked as members are read (``zipfile`` raises on a mismatch); pass
  ``verify=verify_zip_full`` to decompress everything up front instead.
* **Errors.** 404 and other non-retryable answers raise :class:`DownloadError` naming the URL
  and status, immediately.

* **One download per file.** Processes (or threads) asking for the same ``dest`` at once take
  turns on an advisory lock (``flock`` on ``.dest.lock`` beside it, removed after use): the
  first downloads, the others wait and then find the file in the cache.
"""

from __future__ import annotations

import logging
import os
import re
import time
import zipfile
import zlib
from collections.abc import Callable
from pathlib import Path

import requests
import urllib3
from requests.adapters import HTTPAdapter
from urllib3.util.retry import Retry

from psp_core.durations import format_duration
from psp_core.files.file_lock import exclusive_lock, remove_stale_lock

log = logging.getLogger(__name__)

CHUNK_BYTES = 1 << 20
RETRY_STATUSES = (429, 500, 502, 503, 504)
_CONTENT_RANGE = re.compile(r"bytes\s+(\d+)-(\d+)/(\d+|\*)")
_UNSATISFIED_RANGE = re.compile(r"bytes\s+\*/(\d+)")


class DownloadError(RuntimeError):
    """A download failed for a reason retrying will not fix (or retries ran out).

    ``transient`` is True when a later attempt may succeed (the network failed: no connection,
    a timeout, retries spent on 408/429/5xx answers or bodies that broke off), False for a 404
    or another refusal, and for a file that fails verification.
    """

    def __init__(self, message: str, *, transient: bool = False) -> None:
        super().__init__(message)
        self.transient = transient


class _Interrupted(Exception):
    """The body stopped early or did not match; the next attempt resumes or restarts."""


def retrying_session(retries: int = 5, backoff: float = 0.5) -> requests.Session:
    """A ``requests`` session whose adapter retries connection errors and 429/5xx answers."""
    retry = Retry(
        total=retries,
        connect=retries,
        read=retries,
        status=retries,
        status_forcelist=RETRY_STATUSES,
        allowed_methods=frozenset({"GET", "HEAD"}),
        backoff_factor=backoff,
        raise_on_status=False,
        respect_retry_after_header=True,
    )
    session = requests.Session()
    adapter = HTTPAdapter(max_retries=retry)
    session.mount("http://", adapter)
    session.mount("https://", adapter)
    return session


def partial_path(dest: str | Path) -> Path:
    """Where ``download`` keeps the unfinished bytes of ``dest``."""
    dest = Path(dest)
    return dest.with_name(dest.name + ".part")


def _validator_path(partial: Path) -> Path:
    return partial.with_name(partial.name + ".validator")


def verify_zip(path: Path) -> None:
    """Check that ``path`` is a zip whose central directory opens and fits inside the file.

    Raises:
        DownloadError: the file is not a zip or is truncated.
    """
    size = path.stat().st_size
    try:
        with zipfile.ZipFile(path) as archive:
            for info in archive.infolist():
                if info.header_offset + info.compress_size > size:
                    raise zipfile.BadZipFile(
                        f"member {info.filename!r} extends past the end of the file"
                    )
    except zipfile.BadZipFile as err:
        raise DownloadError(f"{path} is not a complete zip file ({err})") from err


def verify_zip_full(path: Path) -> None:
    """:func:`verify_zip` plus a CRC check of every member (decompresses the whole archive)."""
    verify_zip(path)
    with zipfile.ZipFile(path) as archive:
        try:
            bad = archive.testzip()
        except (zipfile.BadZipFile, zlib.error, OSError, EOFError) as err:
            raise DownloadError(f"{path} is a corrupt zip file ({err})") from err
    if bad is not None:
        raise DownloadError(f"{path} is a corrupt zip file: CRC mismatch in member {bad!r}")


def download(
    url: str,
    dest: str | Path,
    *,
    session: requests.Session | None = None,
    retries: int = 5,
    backoff: float = 0.5,
    timeout: float = 60,
    verify: Callable[[Path], None] | None = None,
) -> Path:
    """Download ``url`` to ``dest`` (resumable, retried, length- and zip-checked, cached).

    Args:
        url: http(s) URL.
        dest: final path; returned at once, with no request, if it already exists.
        session: a ``requests`` session; default :func:`retrying_session` ``(retries, backoff)``.
        retries: attempts after the first, for bodies that break off mid-transfer (and, with the
            default session, for connection errors and 429/5xx answers).
        backoff: base of the exponential backoff in seconds.
        timeout: connect and per-read timeout in seconds.
        verify: called on the finished ``.part`` file before the rename; raise to reject it.
            Default: :func:`verify_zip` when ``dest`` ends in ``.zip``, otherwise nothing.

    Raises:
        DownloadError: a non-retryable HTTP answer (404, ...), retries exhausted, or a file
            that fails verification (its partial is deleted).
    """
    dest = Path(dest)
    if cached_file(dest):
        log.info("cache hit, not downloading: %s", dest)
        return dest
    dest.parent.mkdir(parents=True, exist_ok=True)
    with exclusive_lock(
        lock_path(dest),
        on_wait=lambda: log.info("another process is downloading %s; waiting for it", dest),
    ):
        if dest.is_file():  # another process finished it while this one waited
            log.info("downloaded meanwhile by another process: %s", dest)
            return dest
        return _download_locked(url, dest, session, retries, backoff, timeout, verify)


def lock_path(dest: Path) -> Path:
    """The advisory lock file of a download to ``dest``."""
    return dest.with_name(f".{dest.name}.lock")


def cached_file(dest: str | Path) -> bool:
    """Whether ``dest`` is downloaded; a lock file left beside it by a process killed between
    its rename and its clean-up is removed (unless someone holds it)."""
    dest = Path(dest)
    if not dest.is_file():
        return False
    remove_stale_lock(lock_path(dest))
    return True


def _download_locked(
    url: str,
    dest: Path,
    session: requests.Session | None,
    retries: int,
    backoff: float,
    timeout: float,
    verify: Callable[[Path], None] | None,
) -> Path:
    if verify is None and dest.suffix == ".zip":
        verify = verify_zip
    partial = partial_path(dest)
    session = session or retrying_session(retries, backoff)
    failures = 0
    while True:
        before = partial.stat().st_size if partial.exists() else 0
        try:
            _fetch_once(session, url, partial, timeout)
            break
        except _Interrupted as err:
            after = partial.stat().st_size if partial.exists() else 0
            failures = 1 if after > before else failures + 1
            if failures > retries:
                raise DownloadError(
                    f"download of {url} failed after {retries} retries: {err}", transient=True
                ) from err
            delay = backoff * 2 ** (failures - 1)
            log.warning("%s: %s; retrying in %.2fs from byte %d", url, err, delay, after)
            time.sleep(delay)
    if verify is not None:
        try:
            verify(partial)
        except DownloadError:
            partial.unlink(missing_ok=True)
            _validator_path(partial).unlink(missing_ok=True)
            raise
    os.replace(partial, dest)
    _validator_path(partial).unlink(missing_ok=True)
    log.info("downloaded %s -> %s (%d bytes)", url, dest, dest.stat().st_size)
    return dest


def _fetch_once(session: requests.Session, url: str, partial: Path, timeout: float) -> None:
    """One GET: append to (or restart) ``partial``; return when it holds the whole body."""
    offset = partial.stat().st_size if partial.exists() else 0
    validator = _validator_path(partial)
    headers = {"Accept-Encoding": "identity"}
    if offset:
        headers["Range"] = f"bytes={offset}-"
        if validator.is_file():
            headers["If-Range"] = validator.read_text().strip()
    try:
        response = session.get(url, headers=headers, stream=True, timeout=timeout)
    except requests.RequestException as err:
        transient = isinstance(err, (requests.ConnectionError, requests.Timeout)) and not (
            isinstance(err, requests.exceptions.SSLError)
        )
        raise DownloadError(f"download of {url} failed: {err}", transient=transient) from err
    with response:
        total = _expected_total(response, url, partial, offset)
        if total is None and response.status_code == 416:
            return  # the partial already holds the whole file
        if response.status_code == 200 and offset:
            log.warning("%s: server ignored the Range request; restarting from byte 0", url)
        mode = "ab" if response.status_code == 206 else "wb"
        if mode == "wb":  # a fresh start: remember what identifies this version of the file
            etag = response.headers.get("ETag") or response.headers.get("Last-Modified")
            if etag and not etag.startswith("W/"):
                validator.write_text(etag + "\n")
            else:
                validator.unlink(missing_ok=True)
        try:
            with open(partial, mode) as out:
                report = _ByteProgress(url, offset if mode == "ab" else 0, total)
                for chunk in response.raw.stream(CHUNK_BYTES, decode_content=False):
                    out.write(chunk)
                    report.update(len(chunk))
        except (
            urllib3.exceptions.HTTPError,
            requests.RequestException,
            ConnectionError,
            TimeoutError,
        ) as err:  # network trouble only: a full disk is not retried
            raise _Interrupted(f"transfer broke off ({type(err).__name__}: {err})") from err
    size = partial.stat().st_size
    if total is not None and size != total:
        if size > total:
            partial.unlink()
        raise _Interrupted(f"received {size} of {total} bytes")


#: a download reports its progress at least this often (seconds)
PROGRESS_SECONDS = 30.0


class _ByteProgress:
    """Logs ``download <url>: received / total MB (share), MB/s, eta`` every
    :data:`PROGRESS_SECONDS` while a transfer runs (the run's log shows it)."""

    def __init__(self, url: str, start: int, total: int | None) -> None:
        self.url, self.received, self.total = url, start, total
        self.started = self.last = time.monotonic()
        self.new = 0

    def update(self, n: int) -> None:
        self.received += n
        self.new += n
        now = time.monotonic()
        if now - self.last < PROGRESS_SECONDS:
            return
        self.last = now
        rate = self.new / max(now - self.started, 1e-9)
        mb = 1 << 20
        if self.total:
            left = (self.total - self.received) / rate if rate else float("inf")
            log.info(
                "download %s: %.1f / %.1f MB (%.0f%%), %.1f MB/s, eta %s",
                self.url,
                self.received / mb,
                self.total / mb,
                100.0 * self.received / self.total,
                rate / mb,
                format_duration(left),
            )
        else:
            log.info("download %s: %.1f MB, %.1f MB/s", self.url, self.received / mb, rate / mb)


def _expected_total(
    response: requests.Response, url: str, partial: Path, offset: int
) -> int | None:
    """The full file size this answer promises (``None`` if unknown); raise on bad answers."""
    status = response.status_code
    if status == 200:
        length = response.headers.get("Content-Length")
        return int(length) if length is not None else None
    if status == 206:
        match = _CONTENT_RANGE.fullmatch(response.headers.get("Content-Range", "").strip())
        if not match or int(match.group(1)) != offset:
            partial.unlink(missing_ok=True)
            raise _Interrupted(
                f"unusable Content-Range {response.headers.get('Content-Range')!r} for a "
                f"request from byte {offset}; restarting"
            )
        return None if match.group(3) == "*" else int(match.group(3))
    if status == 416 and offset:
        match = _UNSATISFIED_RANGE.fullmatch(response.headers.get("Content-Range", "").strip())
        if match and int(match.group(1)) == offset:
            return None
        partial.unlink(missing_ok=True)
        raise _Interrupted(f"server refused the range from byte {offset}; restarting")
    raise DownloadError(
        f"download of {url} failed: HTTP {status} {response.reason}",
        transient=status == 408 or status in RETRY_STATUSES,
    )
