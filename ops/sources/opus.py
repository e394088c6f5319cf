"""OPUS bitext: resolve corpora through the OPUS API, download their moses zips, write pairs.

Which corpora, versions, caps and OPUS language codes a language uses is configuration data
(:data:`PAPER_MIXTURE`, :data:`OPUS_LANGUAGE_CODES`, :data:`OPUS_LANGUAGE_ALIASES`), not code:
:func:`paper_corpora` turns it into :class:`OpusCorpus` entries, and :func:`corpora_from_config`
reads the same shape from a user's config (a list of ``{"name", "version", "cap", "codes"}``
dicts).

For each corpus, :func:`fetch_opus_bitext` asks
``{api_base}?source=..&target=..&corpus=..&version=..&preprocessing=moses`` for the zip URL
(unless the zip is already in the cache, when it makes no request at all), downloads it into
``cache_dir/opus/{corpus}/{version}/{l1}-{l2}.txt.zip`` (resumable, retried, zip-checked; see
:mod:`psp_core.files.download`) and streams its pairs into one pair file, English side first.
``download_base`` rewrites the zip URL's scheme and host (and prepends its path), for mirrors,
air-gapped sites and tests.

**Language codes.** OPUS spells a language differently per corpus and even per release of one
corpus (Simplified Chinese: ``zh`` in Tanzil, ``zhs`` in GlobalVoices, ``zh_cn`` in OpenSubtitles
v2018 and ``zh_CN`` in v2024), and the API compares codes exactly, case and all. So the
configured code is asked first; when the release lists no moses zip for it, the API's list of
the languages paired with English in that release (``?languages=True``) is read and the first of
the code's aliases it has, compared case-insensitively, is used. This works alike for a pinned
version and for ``latest`` (which the API marks on a corpus's newest release only). The code
and release actually used are recorded in the report (``opus_code``, ``version`` per corpus).
"""

from __future__ import annotations

import logging
import re
import zipfile
import zlib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import requests

from ops.pairs.pair_files import PairWriter
from ops.sources.moses_zip import read_moses_zip_batches
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

#: The spellings OPUS uses for one language across its corpora and releases, in order of
#: preference; tried, case-insensitively, after the configured code when a release lacks it.
OPUS_LANGUAGE_ALIASES: dict[str, tuple[str, ...]] = {
    "zh": ("zh", "zh_cn", "zhs"),
}

_VERSION_PART = re.compile(r"(\d+)|(\D+)")


def version_key(version: str) -> tuple:
    """Sort key for OPUS versions: ``v2`` < ``v10``, ``v2017q3`` < ``v2018``."""
    return tuple(
        (0, int(number), "") if number else (1, 0, text)
        for number, text in _VERSION_PART.findall(version)
    )


class OpusError(RuntimeError):
    """An OPUS corpus could not be resolved or downloaded.

    Raised ``from`` the failed request or :class:`~psp_core.files.download.DownloadError` when there is
    one, which tells whether a retry may help (:func:`ops.sources.transient_errors.is_transient`).
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

    def code_map(self) -> dict[str, str]:
        """Language code -> OPUS code: ``codes``, or the corpus's :data:`OPUS_LANGUAGE_CODES`."""
        return dict(
            self.codes if self.codes is not None else OPUS_LANGUAGE_CODES.get(self.name, {})
        )

    def opus_code(self, lang: str) -> str:
        """The configured OPUS code of ``lang`` in this corpus."""
        return self.code_map().get(lang, lang)

    def opus_codes(self, lang: str) -> list[str]:
        """The codes to look for, in order: the configured one, then ``lang`` and its
        :data:`OPUS_LANGUAGE_ALIASES` (each spelling once, ignoring case)."""
        codes: dict[str, str] = {}
        for code in (self.opus_code(lang), lang, *OPUS_LANGUAGE_ALIASES.get(lang, ())):
            codes.setdefault(code.casefold(), code)
        return list(codes.values())

    def with_release(self, lang: str, version: str, code: str) -> OpusCorpus:
        """This corpus pinned to ``version``, with ``code`` as the OPUS code of ``lang``."""
        return replace(self, version=version, codes=self.code_map() | {lang: code})

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


def _ask(
    params: dict, what: str, *, api_base: str, session: requests.Session, timeout: float
) -> tuple[dict, str]:
    """The API's JSON object answering ``params``, and the URL asked.

    Raises:
        OpusError: the request failed or the answer is not a JSON object (from the error).
    """
    try:
        response = session.get(api_base, params=params, timeout=timeout)
        response.raise_for_status()
        answer = response.json()
        if not isinstance(answer, dict):
            raise ValueError(f"the answer is not a JSON object: {str(answer)[:80]}")
    except (requests.RequestException, ValueError) as err:
        raise OpusError(f"{what}: the OPUS API at {api_base} failed ({err})") from err
    return answer, response.url


@dataclass
class _Lookup:
    """What the API lists for a corpus release's en-X moses zip.

    Attributes:
        entries: the moses entries found (empty: none under any of the codes tried).
        code: the OPUS code of those entries (the configured code when none were found).
        request_url: the first request, for messages.
        similar: when none were found, the codes of the release that start like the language.
    """

    entries: list[dict]
    code: str
    request_url: str
    similar: list[str] = field(default_factory=list)


def _lookup(corpus: OpusCorpus, lang: str, version: str, **api) -> _Lookup:
    """Find the release's moses entries for en-``lang``: under the configured code, else under
    the first of its aliases (:meth:`OpusCorpus.opus_codes`) the release lists, ignoring case.

    ``api`` holds ``api_base``, ``session`` and ``timeout``.
    """
    code = corpus.opus_code(lang)
    entries, request_url = _pair_entries(corpus, code, version, lang, **api)
    if entries:
        return _Lookup(entries, code, request_url)
    params = {"languages": "True", "corpus": corpus.name, "source": "en", "version": version}
    answer, _ = _ask(params | {"preprocessing": "moses"}, corpus.describe(lang), **api)
    listed = [c for c in answer.get("languages") or [] if isinstance(c, str)]
    rank = {c.casefold(): i for i, c in enumerate(corpus.opus_codes(lang))}
    for other in sorted(
        (c for c in listed if c.casefold() in rank), key=lambda c: rank[c.casefold()]
    ):
        if other != code:
            entries, _ = _pair_entries(corpus, other, version, lang, **api)
            if entries:
                return _Lookup(entries, other, request_url)
    stem = lang.split("_")[0].casefold()
    return _Lookup([], code, request_url, [c for c in listed if c.casefold().startswith(stem)])


def _pair_entries(
    corpus: OpusCorpus, code: str, version: str, lang: str, **api
) -> tuple[list[dict], str]:
    """The moses entries the API lists for en-``code`` in ``corpus`` ``version`` (``latest``:
    the newest release), and the URL asked."""
    first, second = sorted(("en", code))
    params = {
        "source": first,
        "target": second,
        "corpus": corpus.name,
        "version": version,
        "preprocessing": "moses",
    }
    answer, request_url = _ask(params, corpus.describe(lang), **api)
    entries = [
        entry
        for entry in answer.get("corpora") or []
        if isinstance(entry, dict)
        and entry.get("corpus") == corpus.name
        and (version == "latest" or entry.get("version") == version)
        and sorted((str(entry.get("source")), str(entry.get("target")))) == [first, second]
        and entry.get("preprocessing", "moses") == "moses"
        and entry.get("url")
    ]
    return entries, request_url


def resolve_opus_zip(
    corpus: OpusCorpus,
    lang: str,
    *,
    api_base: str = OPUS_API,
    session: requests.Session,
    timeout: float = 60,
) -> dict:
    """Ask the OPUS API for ``corpus``'s en-``lang`` moses zip; return its API entry (whose
    ``source``/``target`` give the code used, see the module docstring).

    Raises:
        OpusError: the API failed, or it lists no moses zip for this pair under any of the
            language's codes.
    """
    found = _lookup(
        corpus, lang, corpus.version, api_base=api_base, session=session, timeout=timeout
    )
    if found.entries:
        return max(found.entries, key=lambda e: version_key(str(e.get("version", ""))))
    first, second = sorted(("en", found.code))
    others = [c for c in corpus.opus_codes(lang) if c != found.code]
    tried = f" (nor under {others})" if others else ""
    stem = lang.split("_")[0]
    similar = f"; codes starting with {stem!r} it lists: {found.similar}" if found.similar else ""
    raise OpusError(
        f"{corpus.describe(lang)}: the OPUS API answer from {found.request_url} lists no moses "
        f"zip for {first}-{second}{tried}{similar}; check the corpus name, version and language "
        f"code (a corpus's codes in the registry)"
    )


def newest_opus_release(
    corpus: OpusCorpus,
    lang: str,
    *,
    api_base: str = OPUS_API,
    session: requests.Session,
    timeout: float = 60,
) -> tuple[str, str] | None:
    """The newest release of ``corpus`` the API lists for en-``lang``, and the OPUS code that
    release spells ``lang`` with (None: not listed under any of the language's codes).

    Raises:
        OpusError: the API could not be reached or answered something that is not JSON.
    """
    found = _lookup(corpus, lang, "latest", api_base=api_base, session=session, timeout=timeout)
    versions = [str(e["version"]) for e in found.entries if e.get("version")]
    return (max(versions, key=version_key), found.code) if versions else None


@dataclass(frozen=True)
class OpusZip:
    """A corpus's en-X moses zip in the cache, its release and the code OPUS spells X with."""

    path: Path
    version: str
    code: str


def _cached_zip(directory: Path, code: str) -> Path | None:
    """The complete zip of en-``code`` in ``directory``; a name differing only in case counts
    (OPUS respells a code between releases: ``zh_cn``, ``zh_CN``)."""
    exact = directory / f"{'-'.join(sorted(('en', code)))}.txt.zip"
    if cached_file(exact):
        return exact
    if not directory.is_dir():
        return None
    wanted = {f"en-{code}.txt.zip".casefold(), f"{code}-en.txt.zip".casefold()}
    for path in sorted(directory.iterdir()):
        if path.name.casefold() in wanted and cached_file(path):
            return path
    return None


def _zip_code(name: str) -> str:
    """The non-English code of a pair name or zip name (``en-zh_CN.txt.zip``: ``zh_CN``)."""
    first, second = name.removesuffix(".txt.zip").split("-", 1)
    return second if first == "en" else first


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
) -> OpusZip:
    """The en-``lang`` moses zip of ``corpus`` in ``cache_dir``, downloaded first if needed.

    A zip already cached under ``cache_dir/opus/{corpus}/{version}/{l1}-{l2}.txt.zip`` (the
    configured code, in any case) is returned without any request (the API is asked only for
    version ``latest``).

    Raises:
        OpusError: the API does not list the pair, or the download failed.
    """
    cache_dir = Path(cache_dir)
    if corpus.version != "latest":
        release_dir = cache_dir / "opus" / corpus.name / corpus.version
        cached = _cached_zip(release_dir, corpus.opus_code(lang))
        if cached is not None:
            log.info("%s: using cached %s", corpus.describe(lang), cached)
            return OpusZip(cached, corpus.version, _zip_code(cached.name))
    session = session or retrying_session(retries, backoff)
    entry = resolve_opus_zip(corpus, lang, api_base=api_base, session=session, timeout=timeout)
    pair = "-".join(sorted((str(entry["source"]), str(entry["target"]))))
    version = entry.get("version") or corpus.version
    dest = cache_dir / "opus" / corpus.name / version / f"{pair}.txt.zip"
    url = rebase_url(entry["url"], download_base)
    try:
        path = download(
            url, dest, session=session, retries=retries, backoff=backoff, timeout=timeout
        )
    except DownloadError as err:
        raise OpusError(f"{corpus.describe(lang)}: {err}") from err
    return OpusZip(path, version, _zip_code(pair))


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
    filters, as a seeded sample of the pairs that pass them (:func:`ops.pairs.corpus_caps.cap_corpora`),
    never to the first lines of the file. The report counts every line pair read; drops are
    ``empty`` and ``undecodable``; per-corpus reports are in ``report.corpora``.

    Raises:
        OpusError: a corpus is missing from the API, its download failed (404, retries
            exhausted, truncated zip), or a cached zip is corrupt, naming corpus, languages
            and URL or file.
        UnsafeZipError, ValueError: a hostile zip, or sides of unequal length
            (see :func:`ops.sources.moses_zip.read_moses_zip_batches`).
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
            located = fetch_opus_zip(corpus, lang, cache_dir, **options)
            part = StageReport(f"opus_bitext:{corpus.name}")
            try:
                _copy(located, corpus, part, writer)
            except (zipfile.BadZipFile, zlib.error, EOFError) as err:
                raise OpusError(
                    f"{corpus.describe(lang)}: the cached zip {located.path} is corrupt "
                    f"({err}); delete it and re-run to download it again"
                ) from err
            release = {"version": located.version, "opus_code": located.code}
            report.add(corpus.name, part.finish(), **release)
            log.info("%s: %s from %s", corpus.describe(lang), part.as_dict(), located.path.name)
    return report.finish()


def _copy(located: OpusZip, corpus: OpusCorpus, part: StageReport, writer: PairWriter) -> None:
    """Append the corpus's pairs (English first) to ``writer``, labelled with its name."""
    batches = read_moses_zip_batches(
        located.path, corpus=corpus.name, src_lang="en", tgt_lang=located.code, report=part
    )
    for src, tgt in batches:
        part.n_out += len(src)
        writer.write(src, tgt, corpus=corpus.name)


@dataclass
class CorpusMixReport(StageReport):
    """A :class:`StageReport` over several corpora, keeping each corpus's own report."""

    corpora: dict[str, StageReport] = field(default_factory=dict)
    #: per corpus: what else its record shows (the release read and the OPUS code used)
    details: dict[str, dict] = field(default_factory=dict)

    def add(self, name: str, part: StageReport, **details: str) -> None:
        key = name if name not in self.corpora else f"{name}#{len(self.corpora)}"
        self.corpora[key] = part
        self.details[key] = details
        self.n_in += part.n_in
        self.n_out += part.n_out
        for reason, count in part.dropped.items():
            self.drop(reason, count)
        for remark, count in part.notes.items():
            self.note(remark, count)

    def as_dict(self) -> dict:
        result = super().as_dict()
        result["corpora"] = {
            name: part.as_dict() | self.details.get(name, {}) for name, part in self.corpora.items()
        }
        return result
