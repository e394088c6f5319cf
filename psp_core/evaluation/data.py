"""Evaluation data: the official download URLs, a resumable downloader, and preparation of an
evaluation directory in the layout docs/evaluation.md describes.

``fetch_eval_data`` streams each URL with ``requests`` into ``NAME.part``, retries failed
requests (HTTP 429/5xx, connection errors) through a ``urllib3`` ``Retry`` adapter, resumes an
interrupted body with an HTTP ``Range`` request, checks the size (and a sha256 when one is
given), and renames the file into place when complete. A file already in place is a cache hit.
Downloads go through :mod:`psp_core.files.download` (resume, retry, length check, cache), the same
downloader the corpus sources in ``ops`` use.

``prepare_eval_data`` downloads the archives named in :data:`DEFAULT_EVAL_SOURCES` (or a table
you pass, e.g. pointing at a mirror) and converts them with :mod:`psp_core.evaluation.archives`.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import requests

from psp_core.evaluation import archives
from psp_core.files.download import DownloadError, download, retrying_session
from psp_core.files.stale_temps import remove_stale_temps

log = logging.getLogger(__name__)

STSWIKI = "http://ixa2.si.ehu.es/stswiki/images"
SEMEVAL17 = "http://alt.qcri.org/semeval2017/task1/data/uploads"
LASER_TATOEBA = "https://raw.githubusercontent.com/facebookresearch/LASER/main/data/tatoeba/v1"
#: LASER's Tatoeba v1 languages this project uses: the paper's six and those in shared/data.
TATOEBA_LANGUAGES = (
    "ara", "deu", "spa", "fra", "rus", "tur",
    "ita", "nld", "por", "pol", "ukr", "jpn", "kor", "heb", "hin", "vie", "ell", "bul",
)  # fmt: skip


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


def _checksum(sha256: str | None):
    """A ``download(verify=...)`` check of the finished file against ``sha256`` (if given)."""

    def verify(path: Path) -> None:
        if sha256 is None:
            return
        digest = hashlib.sha256()
        with open(path, "rb") as handle:
            for block in iter(lambda: handle.read(1 << 20), b""):
                digest.update(block)
        if digest.hexdigest() != sha256:
            raise DownloadError(
                f"{path.name}: sha256 {digest.hexdigest()} does not match the expected {sha256}"
            )

    return verify


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
    session = session or retrying_session()
    paths = {}
    for name, source in urls.items():
        if Path(name).name != name or name in ("", ".", ".."):
            raise ValueError(f"download name {name!r} must be a plain file name")
        url, sha256 = (
            (source.url, source.sha256) if isinstance(source, EvalSource) else (source, None)
        )
        paths[name] = download(
            url, dest / name, session=session, retries=attempts, verify=_checksum(sha256)
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
    Temporaries that a killed run left in ``eval_dir`` are removed first (downloads in progress,
    ``NAME.part``, are kept: they resume).
    """
    eval_dir = Path(eval_dir)
    remove_stale_temps(eval_dir)
    cache = Path(cache_dir) if cache_dir else eval_dir / ".downloads"
    wanted = {name: s for name, s in sources.items() if formats is None or s.format in formats}
    failures, downloaded = [], {}
    session = session or retrying_session()
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
