"""Evaluation data: the official download URLs, a resumable downloader, and preparation of an
evaluation directory in the layout of ``shared/data/eval``.

``fetch_eval_data`` streams each URL with ``requests`` into ``NAME.part``, retries failed
requests (HTTP 429/5xx, connection errors) through a ``urllib3`` ``Retry`` adapter, resumes an
interrupted body with an HTTP ``Range`` request, checks the size (and a sha256 when one is
given), and renames the file into place when complete. A file already in place is a cache hit.
(``ops/download.py`` has the pipeline's downloader; ``psp_core`` must not import ``ops``.)

``prepare_eval_data`` downloads the archives named in :data:`DEFAULT_EVAL_SOURCES` (or a table
you pass, e.g. pointing at a mirror) and converts them with :mod:`psp_core.evaluation.archives`.
"""

from __future__ import annotations

import hashlib
import logging
import os
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import requests
from requests.adapters import HTTPAdapter
from urllib3.util.retry import Retry

from psp_core.evaluation import archives

log = logging.getLogger(__name__)

CHUNK_BYTES = 1 << 16
STSWIKI = "http://ixa2.si.ehu.es/stswiki/images"
SEMEVAL17 = "http://alt.qcri.org/semeval2017/task1/data/uploads"
LASER_TATOEBA = "https://raw.githubusercontent.com/facebookresearch/LASER/main/data/tatoeba/v1"
#: LASER's Tatoeba v1 languages this project uses: the paper's six and those in shared/data.
TATOEBA_LANGUAGES = (
    "ara", "deu", "spa", "fra", "rus", "tur",
    "ita", "nld", "por", "pol", "ukr", "jpn", "kor", "heb", "hin", "vie", "ell", "bul",
)  # fmt: skip


class DownloadError(RuntimeError):
    """A download failed after its retries, or its size or checksum is wrong."""


@dataclass(frozen=True)
class EvalSource:
    """One file to download: its URL, the archive format, and optionally its sha256."""

    url: str
    format: str  # a key of archives.CONVERTERS
    sha256: str | None = None


def _default_sources() -> dict[str, EvalSource]:
    sources = {
        "STS2012-en-test.zip": EvalSource(f"{STSWIKI}/4/40/STS2012-en-test.zip", "sts2012"),
        "STS2013-en-test.zip": EvalSource(f"{STSWIKI}/2/2f/STS2013-en-test.zip", "sts2013"),
        "STS2014-en-test.zip": EvalSource(f"{STSWIKI}/8/8c/STS2014-en-test.zip", "sts2014"),
        "STS2015-en-test.zip": EvalSource(f"{STSWIKI}/d/da/STS2015-en-test.zip", "sts2015"),
        "STS2016-en-test.zip": EvalSource(f"{STSWIKI}/9/98/STS2016-en-test.zip", "sts2016"),
        "sts2017.eval.v1.1.zip": EvalSource(f"{SEMEVAL17}/sts2017.eval.v1.1.zip", "sts17-input"),
        "sts2017.gs.zip": EvalSource(f"{SEMEVAL17}/sts2017.gs.zip", "sts17-gold"),
        "Stsbenchmark.tar.gz": EvalSource(f"{STSWIKI}/4/48/Stsbenchmark.tar.gz", "stsb"),
    }
    for lang in TATOEBA_LANGUAGES:
        for side in (lang, "eng"):
            name = f"tatoeba.{lang}-eng.{side}"
            sources[name] = EvalSource(f"{LASER_TATOEBA}/{name}", "tatoeba")
    return sources


#: File name -> source: SemEval STS per year, STS 2017 (inputs and gold), STS Benchmark, and
#: LASER's Tatoeba files. Pass your own mapping to use a mirror.
DEFAULT_EVAL_SOURCES: dict[str, EvalSource] = _default_sources()


def make_session(retries: int = 5, backoff: float = 0.5) -> requests.Session:
    """A session that retries connection errors and HTTP 429/500/502/503/504 with backoff."""
    retry = Retry(
        total=retries,
        backoff_factor=backoff,
        status_forcelist=(429, 500, 502, 503, 504),
        allowed_methods=frozenset({"GET", "HEAD"}),
        raise_on_status=False,
    )
    session = requests.Session()
    adapter = HTTPAdapter(max_retries=retry)
    session.mount("http://", adapter)
    session.mount("https://", adapter)
    return session


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(CHUNK_BYTES), b""):
            digest.update(block)
    return digest.hexdigest()


def _expected_total(response: requests.Response, already: int) -> int | None:
    """Full file size from Content-Range (206) or Content-Length (200), when the server says."""
    content_range = response.headers.get("Content-Range", "")
    if response.status_code == 206 and "/" in content_range:
        total = content_range.rsplit("/", 1)[1]
        return int(total) if total.isdigit() else None
    length = response.headers.get("Content-Length")
    if length is None or not length.isdigit():
        return None
    return int(length) + (already if response.status_code == 206 else 0)


def download_file(
    url: str,
    destination: str | Path,
    *,
    sha256: str | None = None,
    session: requests.Session | None = None,
    attempts: int = 5,
    timeout: float = 60.0,
) -> Path:
    """Download ``url`` to ``destination`` (resuming ``destination.part``); returns the path.

    An existing ``destination`` is returned untouched (it is only ever created complete).
    """
    destination = Path(destination)
    if destination.is_file():
        log.info("%s: cached", destination)
        return destination
    destination.parent.mkdir(parents=True, exist_ok=True)
    partial = destination.with_name(destination.name + ".part")
    session = session or make_session()
    total = None
    for attempt in range(1, attempts + 1):
        already = partial.stat().st_size if partial.exists() else 0
        headers = {"Range": f"bytes={already}-"} if already else {}
        try:
            with session.get(url, headers=headers, stream=True, timeout=timeout) as response:
                if response.status_code == 416 and already and total == already:
                    break  # the partial file already holds everything
                if response.status_code not in (200, 206):
                    raise DownloadError(f"{url}: HTTP {response.status_code} ({response.reason})")
                if response.status_code == 200:
                    already = 0  # the server ignored the range: start over
                total = _expected_total(response, already) or total
                with open(partial, "ab" if already else "wb") as handle:
                    for block in response.iter_content(CHUNK_BYTES):
                        handle.write(block)
            size = partial.stat().st_size
            if total is not None and size != total:
                raise DownloadError(f"{url}: got {size} of {total} bytes")
            break
        except (
            requests.ConnectionError,
            requests.Timeout,
            requests.exceptions.ChunkedEncodingError,
            DownloadError,
        ) as error:
            http_status_error = isinstance(error, DownloadError) and "HTTP" in str(error)
            if http_status_error or attempt == attempts:  # 5xx were retried by the adapter
                raise DownloadError(
                    f"{url}: download failed after {attempt} attempts: {error}"
                ) from error
            log.warning("%s: attempt %d interrupted (%s); resuming", url, attempt, error)
            time.sleep(min(0.5 * attempt, 5.0))
    if sha256 is not None and (digest := _sha256(partial)) != sha256:
        partial.unlink()
        raise DownloadError(f"{url}: sha256 {digest} does not match the expected {sha256}")
    os.replace(partial, destination)
    log.info("%s: downloaded %d bytes", destination, destination.stat().st_size)
    return destination


def fetch_eval_data(
    urls: Mapping[str, str | EvalSource],
    dest: str | Path,
    *,
    session: requests.Session | None = None,
    attempts: int = 5,
) -> dict[str, Path]:
    """Download every ``file name -> URL`` (or :class:`EvalSource`) into ``dest``.

    Files already complete in ``dest`` are skipped; returns ``file name -> path``.
    """
    dest = Path(dest)
    session = session or make_session()
    paths = {}
    for name, source in urls.items():
        if Path(name).name != name or name in ("", ".", ".."):
            raise ValueError(f"download name {name!r} must be a plain file name")
        url, sha256 = (
            (source.url, source.sha256) if isinstance(source, EvalSource) else (source, None)
        )
        paths[name] = download_file(
            url, dest / name, sha256=sha256, session=session, attempts=attempts
        )
    return paths


def prepare_eval_data(
    eval_dir: str | Path,
    *,
    sources: Mapping[str, EvalSource] = DEFAULT_EVAL_SOURCES,
    formats: list[str] | None = None,
    cache_dir: str | Path | None = None,
    session: requests.Session | None = None,
) -> list[str]:
    """Download (cached in ``cache_dir``, default ``eval_dir/.downloads``) and convert the
    sources whose format is in ``formats`` (default: all) into ``eval_dir``.

    Returns the names of the datasets written (e.g. ``sts/2012/MSRpar``); a source that fails to
    download is logged, reported in the exception raised at the end, and does not stop the others.
    """
    eval_dir = Path(eval_dir)
    cache = Path(cache_dir) if cache_dir else eval_dir / ".downloads"
    wanted = {name: s for name, s in sources.items() if formats is None or s.format in formats}
    failures, downloaded = [], {}
    session = session or make_session()
    for name, source in wanted.items():
        try:
            downloaded[name] = fetch_eval_data({name: source}, cache, session=session)[name]
        except DownloadError as error:
            log.warning("%s", error)
            failures.append(str(error))
    written = archives.convert_downloads(
        {name: (path, wanted[name].format) for name, path in downloaded.items()}, eval_dir
    )
    if failures:
        raise DownloadError(f"{len(failures)} downloads failed: " + "; ".join(failures))
    return written
