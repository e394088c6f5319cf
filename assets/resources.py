"""Resources: where data lives, where corpora come from, the language-ID model, compute.

Each is a small configurable interface over the real implementation in ``ops/``; tests point
them at temporary directories and a loopback OPUS server, never at mocks.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
from collections.abc import Sequence
from pathlib import Path

import requests
from dagster import ConfigurableResource, EnvVar
from pydantic import Field

from assets.languages import load_registry
from assets.null_defaults import NullMeansDefault, null_default
from assets.profiles import ProfileResource, profile_from_environment
from ops.langid import LanguageIdentifier
from ops.opus import OPUS_API, OpusCorpus, OpusError, fetch_opus_bitext
from ops.paranmt import PARANMT_URL, fetch_paranmt
from ops.stage_report import StageReport
from psp_core.files.download import retrying_session

log = logging.getLogger(__name__)

_VERSION_PART = re.compile(r"(\d+)|(\D+)")


def version_key(version: str) -> tuple:
    """Sort key for OPUS versions: ``v2`` < ``v10``, ``v2017q3`` < ``v2018``."""
    return tuple(
        (0, int(number), "") if number else (1, 0, text)
        for number, text in _VERSION_PART.findall(version)
    )


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

    def newest_version(self, corpus: OpusCorpus, lang: str) -> str | None:
        """The newest version of ``corpus`` the API lists for en-``lang`` (None: not listed).

        Raises:
            OpusError: the API could not be reached or answered something that is not JSON.
        """
        first, second = sorted(("en", corpus.opus_code(lang)))
        params = {
            "source": first,
            "target": second,
            "corpus": corpus.name,
            "version": "latest",
            "preprocessing": "moses",
        }
        try:
            response = self.session().get(self.api(), params=params, timeout=self.timeout)
            response.raise_for_status()
            entries = response.json().get("corpora", [])
        except (requests.RequestException, ValueError, AttributeError) as err:
            raise OpusError(f"{corpus.describe(lang)}: OPUS API at {self.api()}: {err}") from err
        versions = [
            e["version"]
            for e in entries
            if e.get("corpus") == corpus.name
            and e.get("version")
            and sorted((e.get("source"), e.get("target"))) == [first, second]
        ]
        return max(versions, key=version_key) if versions else None


class ParaNmtResource(DownloadResource):
    """ParaNMT-50M: an http(s) URL of `para-nmt-50m.zip` or a local zip/.txt/.txt.gz path
    (unset, null: the public download; left unset when no language of the registry reads
    ParaNMT)."""

    url: str | None = Field(
        default=None, description=f"ParaNMT's zip, URL or path (null: {PARANMT_URL})."
    )

    def source(self) -> str:
        return self.url or PARANMT_URL

    def fetch(self, cache_dir: Path, output: Path, source: str | Path | None = None) -> StageReport:
        """Write ParaNMT pairs (with scores) from ``source`` (default: :meth:`source`)."""
        return fetch_paranmt(
            source or self.source(),
            cache_dir,
            output,
            retries=self.retries,
            backoff=self.backoff,
            timeout=self.timeout,
        )


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
    """The evaluation datasets directory (`sts/`, `sts17/`, `stsb/`, `tatoeba/`, laid out as
    docs/evaluation.md says); fetch it once with `psp fetch-eval-data`."""

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
    return {
        "storage": StorageResource(root=storage_root or env("PSP_STORAGE_ROOT", "psp_data")),
        "opus": OpusResource(
            api_base=env("PSP_OPUS_API", OPUS_API if "opus" in sources else None),
            download_base=env("PSP_OPUS_DOWNLOAD_BASE", None),
        ),
        "paranmt": ParaNmtResource(
            url=env("PSP_PARANMT_URL", PARANMT_URL if "paranmt" in sources else None)
        ),
        "langid": LanguageIdResource(model_path=env("PSP_LID_MODEL", None)),
        # given only when set: a null_default given, even as null, is shown filled in
        "compute": ComputeResource(**({"device": EnvVar("PSP_DEVICE")} if device else {})),
        "profile": ProfileResource(name=profile_from_environment()),
        "eval_data": EvaluationDataResource(
            eval_dir=env("PSP_EVAL_DIR", str(Path("..") / "shared" / "data" / "eval"))
        ),
    }
