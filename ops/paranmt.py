"""ParaNMT-50M: English paraphrase pairs ``reference<TAB>paraphrase<TAB>score``.

The corpus ships as ``para-nmt-50m.zip`` holding ``para-nmt-50m.txt`` (sometimes under a
``para-nmt-50m/`` folder). :func:`fetch_paranmt` takes a URL (downloaded once into the cache, see
:mod:`psp_core.files.download`) or a local path to the zip, a ``.txt`` or a ``.txt.gz``, and streams the
lines into a pair file with a score column; the text member is read straight from the zip, never
extracted. Malformed lines (not three fields, a score that is not a finite number), undecodable
lines and pairs with an empty side are counted skips.
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

import requests

from ops.moses_zip import check_member_names
from ops.pair_files import PairWriter
from ops.stage_report import StageReport
from psp_core.files.download import download

log = logging.getLogger(__name__)

PARANMT_URL = "http://phontron.com/data/para-nmt-50m.zip"
PARANMT_MEMBER = "para-nmt-50m.txt"
WRITE_BATCH = 50_000


def _is_url(source: str | Path) -> bool:
    return isinstance(source, str) and urlsplit(source).scheme in ("http", "https")


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


def read_paranmt(path: str | Path, report: StageReport) -> Iterator[tuple[str, str, float]]:
    """Stream ``(reference, paraphrase, score)`` from a ParaNMT zip, ``.txt`` or ``.txt.gz``.

    Every line counts in ``report.n_in``; skips are dropped as ``malformed``, ``undecodable``
    or ``empty``; ``report.n_out`` is left to the caller.
    """
    path = Path(path)
    with _open_paranmt_bytes(path) as stream:
        for raw in stream:
            report.n_in += 1
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError:
                report.drop("undecodable")
                continue
            fields = line.rstrip("\r\n").split("\t")
            if len(fields) != 3:
                report.drop("malformed")
                continue
            reference, paraphrase, score_text = fields
            try:
                score = float(score_text)
            except ValueError:
                report.drop("malformed")
                continue
            if not math.isfinite(score):
                report.drop("malformed")
            elif not reference.strip() or not paraphrase.strip():
                report.drop("empty")
            else:
                yield reference.replace("\r", " "), paraphrase.replace("\r", " "), score


def fetch_paranmt(
    url: str | Path,
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
        url: an http(s) URL (default corpus: :data:`PARANMT_URL`), downloaded once into
            ``cache_dir/paranmt/``; or a local zip / ``.txt`` / ``.txt.gz`` path, read in place.
        cache_dir: download cache.
        output: the pair file (``src_lang`` = ``tgt_lang`` = ``en``, with a score column).

    Raises:
        DownloadError: the download failed (404, retries exhausted, truncated zip).
        FileNotFoundError: a local path does not exist.
    """
    if _is_url(url):
        name = PurePosixPath(urlsplit(str(url)).path).name or "para-nmt-50m.zip"
        source = download(
            str(url),
            Path(cache_dir) / "paranmt" / name,
            session=session,
            retries=retries,
            backoff=backoff,
            timeout=timeout,
        )
    else:
        source = Path(url)
        if not source.is_file():
            raise FileNotFoundError(
                f"ParaNMT source {source} does not exist; give an http(s) URL or the path of "
                f"para-nmt-50m.zip / a .txt / .txt.gz file"
            )
    report = StageReport("paranmt")
    with PairWriter(output, src_lang="en", tgt_lang="en", with_score=True) as writer:
        refs: list[str] = []
        paras: list[str] = []
        scores: list[float] = []
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
