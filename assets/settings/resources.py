"""Resources: where data lives, where corpora come from, the language-ID model, compute.

Each is a small configurable interface over the real implementation in ``ops/``; tests point
them at temporary directories and a loopback OPUS server, never at mocks.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
from collections.abc import Sequence
from pathlib import Path

import requests
from dagster import ConfigurableResource, EnvVar
from pydantic import Field

from assets.settings.languages import load_registry
from assets.settings.null_defaults import NullMeansDefault, null_default
from assets.settings.profiles import ProfileResource, profile_from_environment
from ops.language_id.langid import LanguageIdentifier
from ops.sources.opus import OPUS_API, OpusCorpus, fetch_opus_bitext, newest_opus_release
from ops.sources.opus import version_key as version_key  # the sensor's release order
from ops.sources.paranmt import PARANMT_HOWTO, ParaNmtSourceError, fetch_paranmt, paranmt_source
from ops.stage_report import StageReport
from psp_core.files.download import DownloadError, retrying_session

log = logging.getLogger(__name__)

#: How to give ParaNMT to the pipeline (the end of every error about a missing source).
PARANMT_SETTING = "set PSP_PARANMT_URL to its path, a file:// URL or an http(s) URL"


class StorageResource(ConfigurableResource):
    """The storage root: every asset's files, the download cache and the inboxes live under it.

    Layout: `{root}/{lang}/{stage}/` per asset partition, `{root}/cache/` for downloads,
    `{root}/inbox/{lang}/` for bitext a user drops in.
    """

    root: str

    def stage_dir(self, lang: str, stage: str) -> Path:
        path = Path(self.root) / lang / stage
        path.mkdir(parents=True, exist_ok=True)
        return path

    def cache_dir(self) -> Path:
        path = Path(self.root) / "cache"
        path.mkdir(parents=True, exist_ok=True)
        return path

    def inbox_dir(self, lang: str) -> Path:
        """The per-language inbox (not created: an absent inbox is an empty one)."""
        return Path(self.root) / "inbox" / lang

    def inbox_files(self, lang: str) -> list[Path]:
        """The regular, non-hidden files in ``lang``'s inbox, sorted by name."""
        inbox = self.inbox_dir(lang)
        if not inbox.is_dir():
            return []
        return sorted(
            p for p in inbox.iterdir() if p.is_file() and not p.name.startswith((".", "~"))
        )

    def inbox_signature(self, lang: str) -> str:
        """A hash of the inbox's file names, sizes and modification times ('' when empty)."""
        files = self.inbox_files(lang)
        if not files:
            return ""
        listing = [(p.name, p.stat().st_size, p.stat().st_mtime_ns) for p in files]
        return hashlib.sha256(json.dumps(listing).encode()).hexdigest()[:16]


class DownloadResource(ConfigurableResource, NullMeansDefault):
    """What every downloading resource shares: its retry settings."""

    retries: int | None = null_default(
        5, "Retries of a failed request (connection errors, 429, 5xx)."
    )
    backoff: float | None = null_default(
        0.5, "Backoff factor: seconds before a retry, doubling each time."
    )
    timeout: float | None = null_default(60.0, "Seconds without an answer before a retry.")

    def session(self) -> requests.Session:
        return retrying_session(self.retries, self.backoff)


class OpusResource(DownloadResource):
    """The OPUS API and its zip downloads (mirrors and loopback servers via the base URLs).

    `api_base` unset (null) is OPUS's public API; the code location leaves it unset when no
    language of its registry downloads from OPUS, so an offline setup shows no internet URL.
    """

    api_base: str | None = Field(
        default=None, description=f"The OPUS API (null: OPUS's public API, {OPUS_API})."
    )
    download_base: str | None = None

    def api(self) -> str:
        return self.api_base or OPUS_API

    def fetch_bitext(
        self, lang: str, corpora: Sequence[OpusCorpus], cache_dir: Path, output: Path
    ) -> StageReport:
        """Download the corpora's moses zips (cached) and write the raw en-``lang`` pair file."""
        return fetch_opus_bitext(
            lang,
            corpora,
            cache_dir,
            output,
            api_base=self.api(),
            download_base=self.download_base,
            retries=self.retries,
            backoff=self.backoff,
            timeout=self.timeout,
        )

    def newest_release(self, corpus: OpusCorpus, lang: str) -> tuple[str, str] | None:
        """The newest release of ``corpus`` the API lists for en-``lang`` and the OPUS code it
        spells ``lang`` with, whatever the configured code's spelling (None: not listed).

        Raises:
            OpusError: the API could not be reached or answered something that is not JSON.
        """
        return newest_opus_release(
            corpus, lang, api_base=self.api(), session=self.session(), timeout=self.timeout
        )

    def newest_version(self, corpus: OpusCorpus, lang: str) -> str | None:
        """The version of :meth:`newest_release` (None: not listed)."""
        release = self.newest_release(corpus, lang)
        return release[0] if release else None


class ParaNmtResource(DownloadResource):
    """ParaNMT: a local `para-nmt-50m.zip` / `.txt` / `.txt.gz` (three columns, or the
    two-column filtered file), as a path or a `file://` URL, or an http(s) URL to download.
    There is no default: the original download address is dead, and a run of a ParaNMT
    language without a source stops before any work, saying how to get the file."""

    url: str | None = Field(
        default=None,
        description="ParaNMT's file: a local path, a file:// URL or an http(s) URL (null: none; "
        "the en partition then stops at once; docs/corpus.md says where to get it).",
    )

    def source(self) -> str:
        """The ParaNMT source to read: an http(s) URL, or a local file's path.

        Raises:
            ParaNmtSourceError: unset, the dead address, or a missing file; the message is one
                line saying how to get the file and set it.
        """
        try:
            return str(paranmt_source(self.url))
        except ParaNmtSourceError as err:
            raise ParaNmtSourceError(f"{err}; {PARANMT_HOWTO}, then {PARANMT_SETTING}") from None

    def fetch(self, cache_dir: Path, output: Path, source: str | Path | None = None) -> StageReport:
        """Write ParaNMT pairs (with scores, null where the file has none) from ``source``
        (default: :meth:`source`).

        Raises:
            DownloadError: as :func:`ops.sources.paranmt.fetch_paranmt`; one that a retry cannot fix
                (a 404) says how to give the file instead.
        """
        try:
            return fetch_paranmt(
                source or self.source(),
                cache_dir,
                output,
                retries=self.retries,
                backoff=self.backoff,
                timeout=self.timeout,
            )
        except DownloadError as err:
            if err.transient:
                raise
            hint = f"{err}; {PARANMT_HOWTO}, then {PARANMT_SETTING}"
            raise DownloadError(hint, transient=False) from err


class LanguageIdResource(ConfigurableResource):
    """fastText `lid.176`: `model_path` to a `.bin`/`.ftz`, or None for the bundled ftz."""

    model_path: str | None = None

    def identifier(self) -> LanguageIdentifier:
        return LanguageIdentifier(self.model_path)

    def model_name(self) -> str:
        return Path(self.model_path).name if self.model_path else "lid.176.ftz"


DEFAULT_MAX_WORKERS = 8


class ComputeResource(ConfigurableResource, NullMeansDefault):
    """Where and how wide to compute: torch device, torch threads, data-op worker processes,
    and how many trainings may run at once on this machine (file-lock slots under the storage
    root, on top of the `psp_training` pool)."""

    device: str | None = null_default("auto", "cpu, cuda, mps or auto.")
    threads: int | None = None
    workers: int | None = None
    max_concurrent_trainings: int | None = null_default(
        1, "Trainings at once on this machine (file-lock slots under the storage root)."
    )

    def worker_count(self) -> int:
        """``workers``, or by default one per CPU this process may use, at most
        ``DEFAULT_MAX_WORKERS`` (each fastText / sentencepiece worker holds its own model)."""
        if self.workers is not None:
            return max(1, self.workers)
        return max(1, min(len(os.sched_getaffinity(0)), DEFAULT_MAX_WORKERS))


class EvaluationDataResource(ConfigurableResource):
    """The evaluation datasets directory (a folder per evaluation suite: `sts/`, `sts17/`,
    `stsb/`, ..., laid out as docs/evaluation.md says); fetch it once with
    `psp fetch-eval-data`."""

    eval_dir: str

    def path(self) -> Path:
        return Path(self.eval_dir)


def default_resources(storage_root: str | None = None) -> dict[str, ConfigurableResource]:
    """The resources the code location uses, configured from the environment.

    ``PSP_STORAGE_ROOT`` (default ``./psp_data``), ``PSP_OPUS_API``, ``PSP_OPUS_DOWNLOAD_BASE``,
    ``PSP_PARANMT_URL``, ``PSP_LID_MODEL``, ``PSP_DEVICE``, ``PSP_EVAL_DIR`` (default
    ``../shared/data/eval``), ``PSP_PROFILE`` (smoke, demo or paper; default paper); each is
    also settable per run under ``resources:`` in run config.
    """

    def env(name: str, default: str | None) -> str | EnvVar | None:
        return EnvVar(name) if os.environ.get(name) else default

    device = os.environ.get("PSP_DEVICE")
    # the public URLs only where the registry downloads from them (offline: none shown)
    sources = {spec.source for spec in load_registry().languages.values()}
    if "paranmt" in sources and not os.environ.get("PSP_PARANMT_URL"):
        log.warning(
            "PSP_PARANMT_URL is not set, so the registry's ParaNMT languages stop at raw_pairs; "
            "%s, then %s",
            PARANMT_HOWTO,
            PARANMT_SETTING,
        )
    return {
        "storage": StorageResource(root=storage_root or env("PSP_STORAGE_ROOT", "psp_data")),
        "opus": OpusResource(
            api_base=env("PSP_OPUS_API", OPUS_API if "opus" in sources else None),
            download_base=env("PSP_OPUS_DOWNLOAD_BASE", None),
        ),
        "paranmt": ParaNmtResource(url=env("PSP_PARANMT_URL", None)),
        "langid": LanguageIdResource(model_path=env("PSP_LID_MODEL", None)),
        # given only when set: a null_default given, even as null, is shown filled in
        "compute": ComputeResource(**({"device": EnvVar("PSP_DEVICE")} if device else {})),
        "profile": ProfileResource(name=profile_from_environment()),
        "eval_data": EvaluationDataResource(
            eval_dir=env("PSP_EVAL_DIR", str(Path("..") / "shared" / "data" / "eval"))
        ),
    }
