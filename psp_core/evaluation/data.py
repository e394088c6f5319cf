"""Evaluation data: the official download URLs, a resumable downloader, and preparation of an
evaluation directory in the layout docs/evaluation.md describes.

``fetch_eval_data`` streams each URL with ``requests`` into ``NAME.part``, retries failed
requests (HTTP 429/5xx, connection errors) through a ``urllib3`` ``Retry`` adapter, resumes an
interrupted body with an HTTP ``Range`` request, checks the size (and a sha256 when one is
given), and renames the file into place when complete. A file already in place is a cache hit.
Downloads go through :mod:`psp_core.files.download` (resume, retry, length check, cache), the same
downloader the corpus sources in ``ops`` use.

``prepare_eval_data`` downloads the files the registered suites name (:func:`default_eval_sources`,
or a table you pass, e.g. pointing at a mirror) and has the suite whose format each is convert
it into the evaluation directory.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Mapping
from pathlib import Path

import requests

from psp_core.evaluation.registry import registered
from psp_core.evaluation.suite import EvalSource
from psp_core.files.download import DownloadError, download, retrying_session
from psp_core.files.stale_temps import remove_stale_temps

log = logging.getLogger(__name__)


def default_eval_sources() -> dict[str, EvalSource]:
    """File name -> source of every registered suite (SemEval STS per year, STS 2017 inputs and
    gold, the STS Benchmark, LASER's retrieval files, ...). Pass your own mapping to use a
    mirror."""
    return {name: source for each in registered().values() for name, source in each.sources.items()}


def __getattr__(name: str) -> dict[str, EvalSource]:
    if name == "DEFAULT_EVAL_SOURCES":  # the registry's sources, read when asked for
        return default_eval_sources()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


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
    sources: Mapping[str, EvalSource] | None = None,
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
    sources = default_eval_sources() if sources is None else sources
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
    written = convert_downloads(
        {name: (path, wanted[name].format) for name, path in downloaded.items()}, eval_dir
    )
    if failures:
        raise DownloadError(f"{len(failures)} downloads failed: " + "; ".join(failures))
    return written


def convert_downloads(downloads: Mapping[str, tuple[Path, str]], eval_dir: str | Path) -> list[str]:
    """Convert downloaded files (name -> (path, format)) into ``eval_dir``: each by the suite
    whose sources have its format (``sts2012``..``sts2016``, ``sts17-input`` + ``sts17-gold``,
    ``stsb``, ...)."""
    owners = {
        source.format: each for each in registered().values() for source in each.sources.values()
    }
    grouped: dict[str, dict[str, list[Path]]] = {}
    for name, (path, fmt) in downloads.items():
        if fmt not in owners:
            raise ValueError(f"{name}: unknown evaluation data format {fmt!r}")
        grouped.setdefault(owners[fmt].name, {}).setdefault(fmt, []).append(path)
    written: list[str] = []
    for name, each in registered().items():
        if name in grouped:
            written += each.convert(grouped[name], Path(eval_dir))
    return written
