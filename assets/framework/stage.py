"""A stage's files on disk, its manifest, and the input fingerprint that lets a re-run skip it.

Every asset writes into ``{storage root}/{lang}/{asset}/`` and finishes by writing
``manifest.json``: the **fingerprint** of everything that decides its output (the upstream
stages' fingerprints, the settings, the stage's code version), the output file names, and the
stage's record (counts, drops, timings). A later materialization whose fingerprint matches a
manifest whose outputs still exist returns the recorded metadata without redoing the work; the
fingerprint is also the asset's Dagster data version. Downstream stages find their inputs
through the upstream manifest, never by guessing file names or modification times. A stage
starts by removing the temporary files a killed run of it left behind (:mod:`psp_core.files.stale_temps`).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from assets.framework.log_bridge import to_current_step
from assets.settings.resources import StorageResource
from ops.heap_release import release_free_memory
from psp_core.files.file_lock import exclusive_lock
from psp_core.files.stale_temps import remove_stale_temps

MANIFEST = "manifest.json"
#: The lock file runs of a stage take turns on (removed by its holder when done).
LOCK = ".stage.lock"
log = logging.getLogger(__name__)


class StageInputMissing(RuntimeError):
    """An upstream stage has not been materialized for this language."""


def fingerprint(**inputs: Any) -> str:
    """A stable hash of JSON-able ``inputs`` (keys sorted)."""
    blob = json.dumps(inputs, sort_keys=True, default=str, separators=(",", ":"))
    return hashlib.sha256(blob.encode()).hexdigest()[:24]


@dataclass(frozen=True)
class Manifest:
    """What a finished stage wrote."""

    directory: Path
    fingerprint: str
    outputs: dict[str, str]
    record: dict[str, Any]
    reused: bool = False
    #: when the manifest was written (the run whose figures a reused stage shows)
    written_at: str | None = None

    def output(self, name: str) -> Path:
        return self.directory / self.outputs[name]

    def complete(self) -> bool:
        return all(self.output(name).exists() for name in self.outputs)


def read_manifest(directory: Path) -> Manifest | None:
    path = directory / MANIFEST
    if not path.is_file():
        return None
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        return Manifest(
            directory,
            data["fingerprint"],
            data["outputs"],
            data["record"],
            written_at=data.get("written_at"),
        )
    except (json.JSONDecodeError, KeyError, TypeError):
        return None  # an unreadable manifest is as good as none: the stage runs again


@dataclass(frozen=True)
class Stage:
    """One asset partition's directory under the storage root."""

    storage: StorageResource
    lang: str
    name: str

    @property
    def directory(self) -> Path:
        return self.storage.stage_dir(self.lang, self.name)

    def path(self, filename: str) -> Path:
        return self.directory / filename

    def upstream(self, name: str) -> Manifest:
        """The finished upstream stage ``name`` for this language.

        Raises:
            StageInputMissing: it was never materialized, or its files were removed.
        """
        manifest = read_manifest(self.storage.stage_dir(self.lang, name))
        if manifest is None or not manifest.complete():
            raise StageInputMissing(
                f"{self.name} for {self.lang!r} needs {name} for {self.lang!r}, which has no "
                f"complete output under {self.storage.stage_dir(self.lang, name)}; "
                f"materialize {name} (partition {self.lang}) first"
            )
        return manifest

    def cached(self, fingerprint: str) -> Manifest | None:
        """The existing manifest if it has this fingerprint and its outputs exist."""
        manifest = read_manifest(self.directory)
        if manifest and manifest.fingerprint == fingerprint and manifest.complete():
            return dataclasses.replace(manifest, reused=True)
        return None

    def invalidate(self) -> None:
        """Remove the manifest before the outputs are rewritten (a crash leaves no stale one)."""
        (self.directory / MANIFEST).unlink(missing_ok=True)

    def commit(self, fingerprint: str, outputs: dict[str, str], record: dict[str, Any]) -> Manifest:
        """Write the manifest atomically, after the outputs are complete."""
        manifest = Manifest(self.directory, fingerprint, outputs, record)
        missing = [name for name in outputs if not manifest.output(name).exists()]
        if missing:
            raise RuntimeError(f"{self.name}: outputs {missing} were not written")
        body = {
            "stage": self.name,
            "lang": self.lang,
            "fingerprint": fingerprint,
            "outputs": outputs,
            "record": record,
            "written_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        }
        tmp = self.directory / f".{MANIFEST}.tmp-{os.getpid()}"
        tmp.write_text(json.dumps(body, indent=2, sort_keys=True, default=str) + "\n")
        os.replace(tmp, self.directory / MANIFEST)
        return manifest

    def run(
        self,
        fingerprint: str,
        compute: Callable[[], tuple[dict[str, str], dict[str, Any]]],
        *,
        force: bool = False,
    ) -> Manifest:
        """Reuse the stage's output if its fingerprint matches, else ``compute()`` and commit.

        ``compute`` writes the outputs (each atomically) and returns ``(outputs, record)``:
        output name -> file name in :attr:`directory`, and the JSON-able record. Temporary files
        that killed processes left in :attr:`directory` are removed first.

        Runs of one stage take turns (a lock file in :attr:`directory`): a second run of the
        same language waits for the first, then reuses what it wrote instead of computing it
        again beside it.
        """
        with exclusive_lock(
            self.directory / LOCK,
            on_wait=lambda: log.info(
                "%s [%s]: another run is computing this stage; waiting for it", self.name, self.lang
            ),
        ):
            for path in remove_stale_temps(self.directory):
                log.warning("%s [%s]: removed %s, left by a killed run", self.name, self.lang, path)
            if not force and (manifest := self.cached(fingerprint)) is not None:
                message = (
                    f"{self.name} [{self.lang}]: nothing to compute, inputs, settings and code "
                    f"unchanged since {manifest.written_at or 'its last run'}: reusing "
                    f"{manifest.directory}"
                )
                log.info(message)
                to_current_step(message)  # where the user looks: the step's own log
                return manifest
            self.invalidate()
            outputs, record = compute()
            # the next stage (in the same process under the in-process executor) starts from
            # this process's base, not from this stage's high-water mark
            release_free_memory()
            return self.commit(fingerprint, outputs, record)
