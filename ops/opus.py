"""OPUS bitext: resolve corpora through the OPUS API, download their moses zips, write pairs.

Which corpora, versions, caps and OPUS language codes a language uses is configuration data
(:data:`PAPER_MIXTURE`, :data:`OPUS_LANGUAGE_CODES`), not code: :func:`paper_corpora` turns it
into :class:`OpusCorpus` entries, and :func:`corpora_from_config` reads the same shape from a
user's config (a list of ``{"name", "version", "cap", "codes"}`` dicts).

For each corpus, :func:`fetch_opus_bitext` asks
``{api_base}?source=..&target=..&corpus=..&version=..&preprocessing=moses`` for the zip URL
(unless the zip is already in the cache, when it makes no request at all), downloads it into
``cache_dir/opus/{corpus}/{version}/{l1}-{l2}.txt.zip`` (resumable, retried, zip-checked; see
:mod:`psp_core.files.download`) and streams its pairs into one pair file, English side first.
``download_base`` rewrites the zip URL's scheme and host (and prepends its path), for mirrors,
air-gapped sites and tests.
"""

from __future__ import annotations

import logging
import zipfile
import zlib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import requests

from ops.moses_zip import read_moses_zip_batches
from ops.pair_files import PairWriter
from ops.stage_report import StageReport
from psp_core.files.download import DownloadError, cached_file, download, retrying_session

log = logging.getLogger(__name__)

OPUS_API = "https://opus.nlpl.eu/opusapi/"
_PAPER_LANGUAGES = ("ar", "de", "es", "fr", "ru", "tr", "zh")

#: The paper's OPUS mixture: corpus -> version, per-corpus cap (max pairs taken), languages.
PAPER_MIXTURE: dict[str, dict] = {
    "OpenSubtitles": {"version": "v2018", "cap": 4_000_000, "languages": _PAPER_LANGUAGES},
    "Tanzil": {"version": "v1", "cap": None, "languages": _PAPER_LANGUAGES},
    "Europarl": {"version": "v8", "cap": None, "languages": ("es",)},
    "GlobalVoices": {"version": "v2017q3", "cap": None, "languages": _PAPER_LANGUAGES},
    "MultiUN": {"version": "v1", "cap": 4_000_000, "languages": ("ar", "ru", "zh")},
}

#: Per-corpus language codes where OPUS differs from the ISO code (region/script suffixes).
OPUS_LANGUAGE_CODES: dict[str, dict[str, str]] = {
    "OpenSubtitles": {"zh": "zh_cn"},
    "GlobalVoices": {"zh": "zhs"},
}


class OpusError(RuntimeError):
    """An OPUS corpus could not be resolved or downloaded.

    Raised ``from`` the failed request or :class:`~psp_core.files.download.DownloadError` when there is
    one, which tells whether a retry may help (:func:`ops.transient_errors.is_transient`).
    """


@dataclass(frozen=True)
class OpusCorpus:
    """One OPUS corpus to take pairs from.

    Attributes:
        name: corpus name as OPUS spells it (``OpenSubtitles``).
        version: release (``v2018``) or ``latest`` (then the API is always asked).
        cap: at most this many pairs are kept from the corpus (``None``: all).
        codes: language code -> OPUS code for this corpus (``{"zh": "zh_cn"}``); ``None`` uses
            :data:`OPUS_LANGUAGE_CODES` for the corpus name.
    """

    name: str
    version: str
    cap: int | None = None
    codes: Mapping[str, str] | None = field(default=None, hash=False)

    def opus_code(self, lang: str) -> str:
        codes = self.codes if self.codes is not None else OPUS_LANGUAGE_CODES.get(self.name, {})
        return codes.get(lang, lang)

    def describe(self, lang: str) -> str:
        return f"corpus {self.name!r} {self.version} for en-{self.opus_code(lang)}"


def paper_corpora(lang: str) -> list[OpusCorpus]:
    """The paper's OPUS mixture for ``lang`` (OpenSubtitles, Tanzil, GlobalVoices, ...).

    Raises:
        ValueError: the paper trained no model for ``lang``; pass corpora explicitly.
    """
    corpora = [
        OpusCorpus(name, entry["version"], entry["cap"])
        for name, entry in PAPER_MIXTURE.items()
        if lang in entry["languages"]
    ]
    if not corpora:
        raise ValueError(
            f"the paper has no OPUS mixture for {lang!r} (paper languages: "
            f"{', '.join(_PAPER_LANGUAGES)}); list the corpora for it explicitly"
        )
    return corpora


def corpora_from_config(entries: Iterable[Mapping]) -> list[OpusCorpus]:
    """Build corpora from config dicts ``{"name", "version", "cap"?, "codes"?}``."""
    corpora = []
    for entry in entries:
        unknown = set(entry) - {"name", "version", "cap", "codes"}
        if unknown or "name" not in entry or "version" not in entry:
            raise ValueError(
                f"OPUS corpus config {dict(entry)!r}: expected keys name, version and optional "
                f"cap, codes (unknown: {sorted(unknown)})"
            )
        corpora.append(
            OpusCorpus(entry["name"], entry["version"], entry.get("cap"), entry.get("codes"))
        )
    return corpora


def rebase_url(url: str, download_base: str | None) -> str:
    """Replace ``url``'s scheme and host with ``download_base``'s, prepending its path."""
    if not download_base:
        return url
    base, original = urlsplit(download_base), urlsplit(url)
    path = base.path.rstrip("/") + original.path
    return urlunsplit((base.scheme, base.netloc, path, original.query, ""))


def resolve_opus_zip(
    corpus: OpusCorpus,
    lang: str,
    *,
    api_base: str = OPUS_API,
    session: requests.Session,
    timeout: float = 60,
) -> dict:
    """Ask the OPUS API for ``corpus``'s en-``lang`` moses zip; return its API entry.

    Raises:
        OpusError: the API failed, or its answer lists no moses zip for this pair.
    """
    first, second = sorted(("en", corpus.opus_code(lang)))
    params = {
        "source": first,
        "target": second,
        "corpus": corpus.name,
        "version": corpus.version,
        "preprocessing": "moses",
    }
    what = corpus.describe(lang)
    try:
        response = session.get(api_base, params=params, timeout=timeout)
        request_url = response.url
        response.raise_for_status()
        entries = response.json().get("corpora", [])
    except (requests.RequestException, ValueError, AttributeError) as err:
        raise OpusError(f"{what}: the OPUS API at {api_base} failed ({err})") from err
    for entry in entries:
        if (
            entry.get("corpus") == corpus.name
            and (corpus.version == "latest" or entry.get("version") == corpus.version)
            and sorted((entry.get("source"), entry.get("target"))) == [first, second]
            and entry.get("preprocessing", "moses") == "moses"
            and entry.get("url")
        ):
            return entry
    listed = sorted(
        {
            f"{e.get('corpus')} {e.get('version')} {e.get('source')}-{e.get('target')}"
            for e in entries
        }
    )
    raise OpusError(
        f"{what}: the OPUS API answer from {request_url} lists no moses zip for "
        f"{first}-{second} (it lists: {listed or 'nothing'}); check the corpus name, version "
        f"and language code (OPUS spells some with a region, e.g. zh_cn)"
    )


def fetch_opus_zip(
    corpus: OpusCorpus,
    lang: str,
    cache_dir: str | Path,
    *,
    api_base: str = OPUS_API,
    session: requests.Session | None = None,
    download_base: str | None = None,
    retries: int = 5,
    backoff: float = 0.5,
    timeout: float = 60,
) -> Path:
    """The en-``lang`` moses zip of ``corpus`` in ``cache_dir``, downloaded first if needed.

    A zip already cached under ``cache_dir/opus/{corpus}/{version}/{l1}-{l2}.txt.zip`` is
    returned without any request (the API is asked only for version ``latest``).

    Raises:
        OpusError: the API does not list the pair, or the download failed.
    """
    cache_dir = Path(cache_dir)
    pair = "-".join(sorted(("en", corpus.opus_code(lang))))
    if corpus.version != "latest":
        cached = cache_dir / "opus" / corpus.name / corpus.version / f"{pair}.txt.zip"
        if cached_file(cached):
            log.info("%s: using cached %s", corpus.describe(lang), cached)
            return cached
    session = session or retrying_session(retries, backoff)
    entry = resolve_opus_zip(corpus, lang, api_base=api_base, session=session, timeout=timeout)
    version = entry.get("version") or corpus.version
    dest = cache_dir / "opus" / corpus.name / version / f"{pair}.txt.zip"
    url = rebase_url(entry["url"], download_base)
    try:
        return download(
            url, dest, session=session, retries=retries, backoff=backoff, timeout=timeout
        )
    except DownloadError as err:
        raise OpusError(f"{corpus.describe(lang)}: {err}") from err


def fetch_opus_bitext(
    lang: str,
    corpora: Sequence[OpusCorpus],
    cache_dir: str | Path,
    output: str | Path,
    *,
    api_base: str = OPUS_API,
    session: requests.Session | None = None,
    download_base: str | None = None,
    retries: int = 5,
    backoff: float = 0.5,
    timeout: float = 60,
) -> StageReport:
    """Download the en-``lang`` moses zips of ``corpora`` and write one raw pair file.

    The pair file has ``src`` = English always and ``tgt_lang`` = ``lang`` (the partition code,
    ``zh`` even where OPUS says ``zh_cn``), and a ``corpus`` column naming each pair's corpus.
    Corpora are concatenated in the given order, whole: a corpus's cap is applied after the
    filters, as a seeded sample of the pairs that pass them (:func:`ops.corpus_caps.cap_corpora`),
    never to the first lines of the file. The report counts every line pair read; drops are
    ``empty`` and ``undecodable``; per-corpus reports are in ``report.corpora``.

    Raises:
        OpusError: a corpus is missing from the API, its download failed (404, retries
            exhausted, truncated zip), or a cached zip is corrupt, naming corpus, languages
            and URL or file.
        UnsafeZipError, ValueError: a hostile zip, or sides of unequal length
            (see :func:`ops.moses_zip.read_moses_zip_batches`).
    """
    if lang == "en":
        raise ValueError("fetch_opus_bitext builds en-X bitext; lang must not be 'en'")
    session = session or retrying_session(retries, backoff)
    options = {
        "api_base": api_base,
        "session": session,
        "download_base": download_base,
        "retries": retries,
        "backoff": backoff,
        "timeout": timeout,
    }
    report = CorpusMixReport("opus_bitext")
    with PairWriter(
        output, src_lang="en", tgt_lang=lang, with_corpus=True, background=True
    ) as writer:
        for corpus in corpora:
            zip_path = fetch_opus_zip(corpus, lang, cache_dir, **options)
            part = StageReport(f"opus_bitext:{corpus.name}")
            try:
                _copy(zip_path, corpus, lang, part, writer)
            except (zipfile.BadZipFile, zlib.error, EOFError) as err:
                raise OpusError(
                    f"{corpus.describe(lang)}: the cached zip {zip_path} is corrupt ({err}); "
                    f"delete it and re-run to download it again"
                ) from err
            report.add(corpus.name, part.finish())
            log.info("%s: %s", corpus.describe(lang), part.as_dict())
    return report.finish()


def _copy(
    zip_path: Path, corpus: OpusCorpus, lang: str, part: StageReport, writer: PairWriter
) -> None:
    """Append the corpus's pairs (English first) to ``writer``, labelled with its name."""
    batches = read_moses_zip_batches(
        zip_path, corpus=corpus.name, src_lang="en", tgt_lang=corpus.opus_code(lang), report=part
    )
    for src, tgt in batches:
        part.n_out += len(src)
        writer.write(src, tgt, corpus=corpus.name)


@dataclass
class CorpusMixReport(StageReport):
    """A :class:`StageReport` over several corpora, keeping each corpus's own report."""

    corpora: dict[str, StageReport] = field(default_factory=dict)

    def add(self, name: str, part: StageReport) -> None:
        key = name if name not in self.corpora else f"{name}#{len(self.corpora)}"
        self.corpora[key] = part
        self.n_in += part.n_in
        self.n_out += part.n_out
        for reason, count in part.dropped.items():
            self.drop(reason, count)

    def as_dict(self) -> dict:
        result = super().as_dict()
        result["corpora"] = {name: part.as_dict() for name, part in self.corpora.items()}
        return result
