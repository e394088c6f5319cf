"""ParaNMT: English paraphrase pairs, ``reference<TAB>paraphrase<TAB>score``, or
``reference<TAB>paraphrase`` without a score (the filtered files people share).

ParaNMT-50M ships as ``para-nmt-50m.zip`` holding ``para-nmt-50m.txt`` (sometimes under a
``para-nmt-50m/`` folder). Its original address answers 404 and no other address can be vouched
for, so there is no default source: :func:`paranmt_source` checks the one given (an http(s) URL,
a ``file://`` URL or a local path) before anything is read, and refuses the dead address.
:func:`fetch_paranmt` downloads a URL once into the cache (see :mod:`psp_core.files.download`) or
reads a local zip, ``.txt`` or ``.txt.gz`` in place, and streams the lines into a pair file with
a score column; the text member is read straight from the zip, never extracted.

A file has one shape, fixed by its first line that fits one: three fields whose third is a
finite number (scored), or two fields (unscored: the score is null, which the paraphrase filter
does not judge; see :func:`ops.cleaning.filters.filter_pairs`). A line of the other shape (a scored line
cut short looks unscored), of another field count or with a score that is not a finite number
is counted as ``malformed``; undecodable lines and pairs with an empty side are counted skips
too. Pairs read without a score are counted in the report's ``notes`` as ``unscored``.
"""

from __future__ import annotations

import gzip
import io
import logging
import math
import zipfile
import zlib
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path, PurePosixPath
from typing import IO
from urllib.parse import urlsplit
from urllib.request import url2pathname

import requests

from ops.pairs.pair_files import PairWriter
from ops.sources.moses_zip import check_member_names
from ops.stage_report import StageReport
from psp_core.files.download import download

log = logging.getLogger(__name__)

#: Where ParaNMT-50M was first published; the address answers 404, so it is refused before any
#: work rather than failing a run after its other languages.
DEAD_URLS = frozenset(
    {"http://phontron.com/data/para-nmt-50m.zip", "https://phontron.com/data/para-nmt-50m.zip"}
)
#: What to do when there is no usable source (one line, shown in errors).
PARANMT_HOWTO = (
    "ParaNMT has no working public download: get para-nmt-50m.zip or the filtered two-column "
    "para-nmt-5m-processed file (docs/corpus.md, 'ParaNMT')"
)
PARANMT_MEMBER = "para-nmt-50m.txt"
WRITE_BATCH = 50_000


class ParaNmtSourceError(ValueError):
    """No usable ParaNMT source: none given, the dead address, or a local file that is not
    there. The message is one line."""


def paranmt_source(source: str | Path | None) -> str | Path:
    """The ParaNMT source to read: an http(s) URL (returned as given), or a local file's path
    (a ``file://`` URL becomes its path).

    Raises:
        ParaNmtSourceError: ``source`` is empty, the dead address (:data:`DEAD_URLS`), a
            ``file://`` URL of another host, or a path that is not an existing file.
    """
    if source is None or not str(source).strip():
        raise ParaNmtSourceError("no ParaNMT source is set")
    if isinstance(source, str):
        source = source.strip()
        parts = urlsplit(source)
        if parts.scheme in ("http", "https"):
            if source in DEAD_URLS:
                raise ParaNmtSourceError(f"{source} is ParaNMT's original address, now gone (404)")
            return source
        if parts.scheme == "file":
            if parts.netloc not in ("", "localhost"):
                raise ParaNmtSourceError(f"{source} names another host; use file:///path")
            source = url2pathname(parts.path)
    path = Path(source)
    if not path.exists():
        raise ParaNmtSourceError(f"ParaNMT file {path} does not exist")
    if not path.is_file():
        raise ParaNmtSourceError(f"ParaNMT source {path} is not a file")
    return path


@contextmanager
def _open_paranmt_bytes(path: Path) -> Iterator[IO[bytes]]:
    """Open the ParaNMT text as a binary stream: from a zip member, a .gz, or a plain file."""
    if path.suffix == ".zip" or (
        path.suffix not in (".gz", ".txt", ".tsv") and zipfile.is_zipfile(path)
    ):
        with zipfile.ZipFile(path) as archive:
            check_member_names(archive, path)
            names = [n for n in archive.namelist() if not n.endswith("/")]
            exact = [n for n in names if PurePosixPath(n).name == PARANMT_MEMBER]
            texts = [n for n in names if n.endswith(".txt")]
            candidates = exact or texts
            if len(candidates) != 1:
                raise ValueError(
                    f"{path}: expected one member named {PARANMT_MEMBER!r} (or a single .txt "
                    f"member) in the ParaNMT zip, found {names[:20]}"
                )
            with io.BufferedReader(archive.open(candidates[0]), 1 << 20) as stream:
                yield stream
    elif path.suffix == ".gz":
        with gzip.open(path, "rb") as stream:
            yield stream
    else:
        with open(path, "rb", buffering=1 << 20) as stream:
            yield stream


def _score(text: str) -> float | None:
    """The score field as a finite float, or None."""
    try:
        score = float(text)
    except ValueError:
        return None
    return score if math.isfinite(score) else None


def read_paranmt(path: str | Path, report: StageReport) -> Iterator[tuple[str, str, float | None]]:
    """Stream ``(reference, paraphrase, score or None)`` from a ParaNMT zip, ``.txt`` or
    ``.txt.gz``, in the shape of its first line that fits one (see the module docstring).

    Every line counts in ``report.n_in``; skips are dropped as ``malformed``, ``undecodable``
    or ``empty``; unscored pairs are noted as ``unscored``; ``report.n_out`` is left to the
    caller.
    """
    path = Path(path)
    shape = None  # 3: scored, 2: unscored
    with _open_paranmt_bytes(path) as stream:
        for raw in stream:
            report.n_in += 1
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError:
                report.drop("undecodable")
                continue
            fields = line.rstrip("\r\n").split("\t")
            score = _score(fields[2]) if len(fields) == 3 else None
            fits = 3 if score is not None else 2 if len(fields) == 2 else None
            if fits is None or (shape is not None and fits != shape):
                report.drop("malformed")
                continue
            shape = fits
            reference, paraphrase = fields[0], fields[1]
            if not reference.strip() or not paraphrase.strip():
                report.drop("empty")
                continue
            if score is None:
                report.note("unscored")
            yield reference.replace("\r", " "), paraphrase.replace("\r", " "), score


def fetch_paranmt(
    url: str | Path | None,
    cache_dir: str | Path,
    output: str | Path,
    *,
    session: requests.Session | None = None,
    retries: int = 5,
    backoff: float = 0.5,
    timeout: float = 60,
) -> StageReport:
    """Write ParaNMT pairs (``src`` = reference, ``tgt`` = paraphrase, ``score``) to ``output``.

    Args:
        url: an http(s) URL, downloaded once into ``cache_dir/paranmt/``; or a local zip /
            ``.txt`` / ``.txt.gz`` path or ``file://`` URL, read in place
            (see :func:`paranmt_source`).
        cache_dir: download cache.
        output: the pair file (``src_lang`` = ``tgt_lang`` = ``en``, with a score column, null
            for the pairs of a two-column file).

    Raises:
        ParaNmtSourceError: no source, the dead address, or a local file that is not there.
        DownloadError: the download failed (404, retries exhausted, truncated zip).
        ValueError: a zip without one text member, or a corrupt file.
    """
    source = paranmt_source(url)
    if isinstance(source, str):
        name = PurePosixPath(urlsplit(source).path).name or "para-nmt-50m.zip"
        source = download(
            source,
            Path(cache_dir) / "paranmt" / name,
            session=session,
            retries=retries,
            backoff=backoff,
            timeout=timeout,
        )
    report = StageReport("paranmt")
    with PairWriter(output, src_lang="en", tgt_lang="en", with_score=True) as writer:
        refs: list[str] = []
        paras: list[str] = []
        scores: list[float | None] = []
        try:
            for reference, paraphrase, score in read_paranmt(source, report):
                report.n_out += 1
                refs.append(reference)
                paras.append(paraphrase)
                scores.append(score)
                if len(refs) >= WRITE_BATCH:
                    writer.write(refs, paras, scores)
                    refs, paras, scores = [], [], []
        except (zipfile.BadZipFile, zlib.error, EOFError, gzip.BadGzipFile) as err:
            raise ValueError(
                f"ParaNMT source {source} is corrupt ({err}); delete it (a cached download is "
                f"fetched again on the next run)"
            ) from err
        writer.write(refs, paras, scores)
    log.info("ParaNMT from %s: %s", source, report.as_dict())
    return report.finish()
