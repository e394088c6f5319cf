"""The model versions of one language and the one promoted among them.

A language's registry is a folder (``{storage root}/{lang}/psp_model/`` in the pipeline)::

    versions/{version}/model/         the bundle; a version is never rewritten
    versions/{version}/version.json   its fingerprint, creation time, training record, lineage,
                                      how it was trained (``retrain``) and dev scores, written
                                      with it
    versions/{version}/evaluation.json   its test-set scores, written by its evaluation
    versions/{version}/train_pairs.npy   the sorted 64-bit keys of every pair its lineage trained
                                      on (the pipeline's versions: what an incremental retrain
                                      tells new pairs by)
    promoted -> versions/{version}    a symbolic link, swapped in one rename
    versions/{version}/exports/       its exports (sentence-transformers, model2vec), if any
    model -> promoted/model           where earlier releases kept the model and its exports: the
    exports -> promoted/exports       promoted version's
    promotions.jsonl                  every promotion and rollback, appended

A version is written under a temporary name and renamed into ``versions/`` whole, so a killed
run leaves no half version (its temporary is removed by the next one). Promoting renames a new
link over ``promoted``: a reader that resolves the link once (:func:`psp_core.models.bundle.load_bundle`
resolves the path it is given before reading a file) loads the old bundle or the new one, never
a mix. Promotions, rollbacks and pruning take turns on a lock file.

Only a version whose bundle verifies (:func:`psp_core.models.bundle.verify_bundle`, the checks
``psp info`` makes) is promoted or rolled back to: a damaged one raises :class:`DamagedVersion`
and leaves the link and the history as they were. Promoting the version already promoted
changes nothing (its rollback target stays). A rollback promotes the version promoted before
the current one and records the current one as its own rollback target, so two rollbacks in a
row come back to where they started (they swap the last two versions, like ``cd -``).

A folder that holds a bundle as ``model/`` from before versions existed is adopted by an explicit
step (:meth:`ModelRegistry.open`, which the commands that write versions use, or
:meth:`ModelRegistry.adopt_legacy_bundle`): the bundle (and ``exports/``) becomes the first
version and is promoted. Making a :class:`ModelRegistry` and reading it moves nothing.
"""

from __future__ import annotations

import json
import logging
import os
import re
import shutil
import time
from collections.abc import Callable
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from psp_core.files.file_lock import exclusive_lock
from psp_core.files.output_files import write_error, write_text_if_changed
from psp_core.files.stale_temps import remove_stale_temps
from psp_core.models.bundle import verify_bundle
from psp_core.models.bundle_config import BundleError

VERSIONS = "versions"
PROMOTED = "promoted"
LEGACY_MODEL = "model"
BUNDLE = "model"
VERSION_FILE = "version.json"
#: the keys of the pairs a version's lineage trained on (:mod:`ops.pairs.pair_lineage`)
TRAIN_PAIRS = "train_pairs.npy"
EXPORTS = "exports"
#: links beside ``promoted`` to the same names in the promoted version: the paths where earlier
#: releases kept the model and its exports
PASS_THROUGH = (LEGACY_MODEL, EXPORTS)
log = logging.getLogger(__name__)
HISTORY = "promotions.jsonl"
#: a version's scores on the test sets, written by its evaluation (never read by the gate)
EVALUATION_FILE = "evaluation.json"
LOCK = ".registry.lock"
#: the pipeline's folder of a language's registry under the storage root
STAGE = "psp_model"


#: how a version was trained (``version.json``'s ``retrain``, :func:`retrain_record`)
RETRAIN_MODES = ("full", "incremental")


class RegistryError(ValueError):
    """An unknown version, nothing to roll back to, or a folder that is not a registry."""


class DamagedVersion(RegistryError):
    """A version whose bundle does not verify: it is not promoted (the message says why)."""


#: the history's entries that moved the ``promoted`` link
MOVES = ("promote", "rollback")


STORAGE_ENV = "PSP_STORAGE_ROOT"
#: where storage is when neither a flag nor PSP_STORAGE_ROOT says: make run's, then the Dagster
#: resource's default, relative to the current directory
DEFAULT_STORAGE_ROOTS = ("runs/psp_data", "psp_data")
#: what the commands that take ``--storage-root`` say of it
STORAGE_ROOT_HELP = (
    f"the pipeline's storage root (default: ${STORAGE_ENV}, else "
    f"{' or '.join(DEFAULT_STORAGE_ROOTS)} if there)"
)
NO_STORAGE_ROOT = f"no {' or '.join(DEFAULT_STORAGE_ROOTS)} here"


def storage_root(given: str | None = None) -> Path | None:
    """The pipeline's storage root: ``given``, else ``$PSP_STORAGE_ROOT``, else the first of
    :data:`DEFAULT_STORAGE_ROOTS` that exists; None when none does."""
    if given:
        return _not_a_file(Path(given), "--storage-root")
    if os.environ.get(STORAGE_ENV):
        return _not_a_file(Path(os.environ[STORAGE_ENV]), f"${STORAGE_ENV}")
    return next((Path(c) for c in DEFAULT_STORAGE_ROOTS if Path(c).is_dir()), None)


def _not_a_file(root: Path, source: str) -> Path:
    """``root`` as given; a storage root that exists but is not a folder is named, with where
    it came from (a path that does not exist yet has no versions, which the caller says)."""
    if root.exists() and not root.is_dir():
        raise RegistryError(f"the storage root {root} (from {source}) is not a folder")
    return root


def language_registry(storage_root: str | Path, lang: str) -> Path:
    """The registry folder of ``lang`` under the pipeline's storage root."""
    return Path(storage_root) / lang / STAGE


@dataclass(frozen=True)
class Version:
    """One immutable model version: ``directory`` holds ``model/`` and ``version.json``."""

    id: str
    directory: Path
    info: dict[str, Any]

    @property
    def bundle(self) -> Path:
        return self.directory / BUNDLE

    @property
    def fingerprint(self) -> str | None:
        return self.info.get("fingerprint")

    @property
    def dev_scores(self) -> dict[str, float]:
        return self.info.get("dev_scores") or {}

    @property
    def retrain(self) -> dict[str, Any] | None:
        """How it was trained (:func:`retrain_record`); None for a version written before
        versions recorded it."""
        return self.info.get("retrain")

    @property
    def train_pairs(self) -> Path | None:
        """The keys of the pairs its lineage trained on, if it keeps them."""
        path = self.directory / TRAIN_PAIRS
        return path if path.is_file() else None

    @property
    def test_scores(self) -> dict[str, float]:
        """The scores of its last evaluation on the test sets (``evaluation.json``), if any."""
        return (_read_json(self.directory / EVALUATION_FILE) or {}).get("test_scores") or {}


def retrain_record(
    mode: str, *, parent: str | None, new_pairs: int, replay_pairs: int, reason: str
) -> dict[str, Any]:
    """A version's ``retrain`` entry: ``mode`` (one of :data:`RETRAIN_MODES`), ``parent`` (the
    version whose weights and vocabulary it continued, None when trained from scratch), the
    pairs it trained on that its parent had not (``new_pairs``; all of them from scratch) and
    those its parent had (``replay_pairs``), and why that mode."""
    if mode not in RETRAIN_MODES:
        raise ValueError(f"retrain mode must be one of {RETRAIN_MODES}, got {mode!r}")
    return {
        "mode": mode,
        "parent": parent,
        "new_pairs": int(new_pairs),
        "replay_pairs": int(replay_pairs),
        "reason": reason,
    }


def last_decision(history: list[dict[str, Any]], version_id: str) -> dict[str, Any] | None:
    """The newest entry of a registry's ``history`` about ``version_id`` (promoted, rejected,
    rolled back to), or None."""
    return next((e for e in reversed(history) if e.get("version") == version_id), None)


_SERVABLE_ID = re.compile(r"[A-Za-z0-9._-]+")


def _end_of_last_line(path: Path, size: int) -> int:
    """The size of ``path`` up to and including its last newline (``size`` when it ends with
    one, or is empty)."""
    if size == 0:
        return 0
    with open(path, "rb") as handle:
        position = size
        while position > 0:
            step = min(65536, position)
            handle.seek(position - step)
            block = handle.read(step)
            if position == size and block.endswith(b"\n"):
                return size
            newline = block.rfind(b"\n")
            if newline >= 0:
                return position - step + newline + 1
            position -= step
    return 0


def servable_id(version_id: str) -> bool:
    """Whether ``version_id`` fits in an HTTP header as it is (the ids the registry writes
    do: ``20261207T031500Z-1a2b3c4d``)."""
    return _SERVABLE_ID.fullmatch(version_id) is not None


class ModelRegistry:
    """The versions under ``root`` (see the module docstring)."""

    def __init__(self, root: str | Path) -> None:
        """The registry under ``root``, as it is: making one reads and writes nothing (a bundle
        of an earlier release is adopted only by :meth:`open` or :meth:`adopt_legacy_bundle`)."""
        self.root = Path(root)
        self.versions_dir = self.root / VERSIONS

    @classmethod
    def open(cls, root: str | Path) -> ModelRegistry:
        """The registry under ``root``, a bundle of an earlier release there adopted first: what
        a command that writes versions (training, promoting, rolling back) starts with."""
        registry = cls(root)
        registry.adopt_legacy_bundle()
        return registry

    def legacy_bundle(self) -> Path | None:
        """``model/`` when it is a bundle written before versions (a folder, not the link to
        the promoted version's), else None."""
        legacy = self.root / LEGACY_MODEL
        return legacy if legacy.is_dir() and not legacy.is_symlink() else None

    # reading ------------------------------------------------------------------------------------

    def versions(self) -> list[Version]:
        """Every complete version, oldest first: ids start with their UTC creation time to the
        second, and versions made in the same second are ordered by the exact time they keep
        (their ids' random part would not be)."""
        if not self.versions_dir.is_dir():
            return []
        found = []
        for directory in self.versions_dir.iterdir():
            if directory.name.startswith(".") or not directory.is_dir():
                continue
            info = _read_info(directory)
            if info is not None:
                found.append(Version(directory.name, directory, info))
        return sorted(found, key=_creation_order)

    def version(self, version_id: str) -> Version:
        directory = self.versions_dir / version_id
        info = _read_info(directory) if "/" not in version_id and version_id[:1] != "." else None
        if info is None:
            known = ", ".join(v.id for v in self.versions()) or "none"
            raise RegistryError(f"{self.root}: no version {version_id!r} (versions: {known})")
        return Version(version_id, directory, info)

    def find(self, fingerprint: str) -> Version | None:
        """The newest version trained from ``fingerprint``'s inputs and settings."""
        matching = [v for v in self.versions() if v.fingerprint == fingerprint]
        return matching[-1] if matching else None

    def promoted(self) -> Version | None:
        """The promoted version (the link resolved once), or None before the first."""
        try:
            target = os.readlink(self.root / PROMOTED)
        except (FileNotFoundError, OSError):
            return None
        version_id = Path(target).name
        try:
            return self.version(version_id)
        except RegistryError:
            return None  # its version was removed by hand

    def history(self) -> list[dict[str, Any]]:
        path = self.root / HISTORY
        if not path.is_file():
            return []
        entries = []
        for line in path.read_text(encoding="utf-8").splitlines():
            try:
                entries.append(json.loads(line))
            except json.JSONDecodeError:
                continue  # a line cut short by a crash while appending
        return entries

    def previous(self) -> Version | None:
        """The version promoted before the current one: what :meth:`rollback` brings back."""
        current = self.promoted()
        if current is None:
            return None
        for entry in reversed(self.history()):
            if entry.get("version") == current.id and entry.get("action") in MOVES:
                previous = entry.get("previous")
                if previous is None:
                    return None
                try:
                    return self.version(previous)
                except RegistryError:
                    return None
        return None

    # writing ------------------------------------------------------------------------------------

    def add_version(
        self,
        fingerprint: str,
        build: Callable[[Path], dict[str, Any]],
        *,
        created: float | None = None,
    ) -> Version:
        """Write a new version: ``build(bundle_path)`` writes the bundle there and returns the
        version's information (training record, lineage, dev scores...); the whole version is
        then renamed into place. A killed ``build`` leaves only a temporary, removed next time."""
        created = time.time() if created is None else created
        self.versions_dir.mkdir(parents=True, exist_ok=True)
        remove_stale_temps(self.versions_dir)
        stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(created))
        version_id = f"{stamp}-{fingerprint[:8]}"
        suffix = 1
        while (self.versions_dir / version_id).exists():
            suffix += 1
            version_id = f"{stamp}-{fingerprint[:8]}-{suffix}"
        draft = self.versions_dir / f".{version_id}.tmp-{os.getpid()}"
        shutil.rmtree(draft, ignore_errors=True)
        draft.mkdir()
        try:
            info = dict(build(draft / BUNDLE))
            info.update(
                version=version_id,
                fingerprint=fingerprint,
                created_at=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(created)),
                created_time=created,
            )
            _write_json(draft / VERSION_FILE, info)
            os.rename(draft, self.versions_dir / version_id)
        except BaseException:
            shutil.rmtree(draft, ignore_errors=True)
            raise
        return Version(version_id, self.versions_dir / version_id, info)

    def promote(
        self, version_id: str, *, reason: str, scores: dict[str, Any] | None = None
    ) -> Version:
        """Make ``version_id`` the promoted version (one rename of a new link) and record it;
        the version already promoted is left as it is, with its rollback target.

        Raises:
            DamagedVersion: its bundle does not verify (nothing changed).
        """
        return self.promote_decided(version_id, reason=reason, scores=scores)[0]

    def promote_decided(
        self, version_id: str, *, reason: str, scores: dict[str, Any] | None = None
    ) -> tuple[Version, bool]:
        """:meth:`promote`, and whether it changed anything, decided inside the lock (of two
        promotions of one version at the same instant, one promotes and the other says it was
        already promoted, never both)."""
        with self._locked():
            version = self.version(version_id)
            current = self.promoted()
            if current is not None and current.id == version.id:
                return version, False
            return self._promote(version, "promote", reason, scores), True

    def verify(self, version: Version) -> None:
        """Raise :class:`DamagedVersion` (one line) unless ``version``'s bundle verifies."""
        try:
            verify_bundle(version.bundle)
        except (BundleError, OSError) as error:
            current = self.promoted()
            stays = current.id if current is not None else "none"
            raise DamagedVersion(
                f"version {version.id} cannot be promoted, its bundle does not verify: {error} "
                f"(the promoted version stays {stays})"
            ) from error

    def record_evaluation(self, version_id: str, test_scores: dict[str, float]) -> None:
        """Keep ``version_id``'s test-set scores beside it (``psp models list`` shows them); the
        same scores again (a re-run that reused its evaluation) leave the file untouched."""
        version = self.version(version_id)
        _write_json(version.directory / EVALUATION_FILE, {"test_scores": test_scores})

    def record_decision(
        self, version_id: str, *, reason: str, scores: dict[str, Any] | None = None
    ) -> None:
        """Record that ``version_id`` was considered and not promoted (the gate's ``reject``)."""
        with self._locked():
            self._append_history(
                {"action": "reject", "version": version_id, "previous": None, "reason": reason},
                scores,
            )

    def rollback(self, *, reason: str = "rollback") -> Version:
        """Promote again the version promoted before the current one."""
        with self._locked():
            current, target = self.promoted(), self.previous()
            if current is None:
                raise RegistryError(f"{self.root}: no promoted version to roll back from")
            if target is None:
                raise RegistryError(
                    f"{self.root}: {current.id} is the first promoted version (or the one before "
                    "it was removed): nothing to roll back to"
                )
            return self._promote(target, "rollback", reason, None)

    def prune(self, keep: int) -> list[str]:
        """Remove all versions but the newest ``keep``, the promoted one and the one a rollback
        would bring back; returns the removed ids."""
        if keep < 1:
            raise ValueError(f"keep must be >= 1, got {keep}")
        with self._locked():
            versions = self.versions()
            kept = {v.id for v in versions[-keep:]}
            for version in (self.promoted(), self.previous()):
                if version is not None:
                    kept.add(version.id)
            removed = []
            for version in versions:
                if version.id in kept:
                    continue
                doomed = self.versions_dir / f".{version.id}.tmp-{os.getpid()}"
                os.rename(version.directory, doomed)  # gone from the listing in one step
                shutil.rmtree(doomed, ignore_errors=True)
                removed.append(version.id)
            return removed

    # internals ----------------------------------------------------------------------------------

    @contextmanager
    def _locked(self):
        self.root.mkdir(parents=True, exist_ok=True)
        with exclusive_lock(self.root / LOCK):
            yield

    def _promote(
        self,
        version: Version,
        action: str,
        reason: str,
        scores: dict[str, Any] | None,
        *,
        verify: bool = True,
    ) -> Version:
        if not servable_id(version.id):
            raise RegistryError(
                f"version {version.id!r} cannot be promoted ({action}): a server names the version of "
                "each answer in a header, which takes printable ASCII only; rename its folder "
                "with letters, digits, '.', '_' and '-' (as the ids the registry writes are)"
            )
        if verify:
            self.verify(version)
        current = self.promoted()
        previous = current.id if current is not None and current.id != version.id else None
        entry = {"action": action, "version": version.id, "previous": previous, "reason": reason}
        # recorded whole first (synced), then the link moved; a move that fails takes the
        # record back: a promotion is in the history exactly when the link points at it
        recorded = self._append_history(entry, scores)
        try:
            self._point(PROMOTED, Path(VERSIONS) / version.id)
        except OSError as error:
            self._truncate_history(recorded)
            raise write_error(self.root / PROMOTED, error) from error
        for name in PASS_THROUGH:
            if not (self.root / name).is_symlink():
                self._point(name, Path(PROMOTED) / name)
        return version

    def _point(self, name: str, target: Path) -> None:
        """Make the link ``name`` point at ``target``: a new link renamed over the old one."""
        link = self.root / f".{name}.tmp-{os.getpid()}"
        link.unlink(missing_ok=True)
        try:
            os.symlink(target, link)
            os.replace(link, self.root / name)
        finally:
            link.unlink(missing_ok=True)

    def _append_history(self, entry: dict[str, Any], scores: dict[str, Any] | None) -> int:
        """Append ``entry`` as one synced line; returns the history's size before it. A last
        line an older writer left unfinished is dropped first (with a warning), never appended
        to; a write that fails (a full disk) takes back what it wrote and names the file."""
        entry = {"time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), **entry}
        if scores:
            entry["scores"] = scores
        path = self.root / HISTORY
        line = (json.dumps(entry, sort_keys=True) + "\n").encode("utf-8")
        try:
            with open(path, "ab") as handle:
                size = handle.seek(0, os.SEEK_END)
                whole = _end_of_last_line(path, size)
                if whole != size:
                    log.warning("%s: its last line was cut short (%d bytes): dropped", path,
                                size - whole)  # fmt: skip
                    handle.truncate(whole)
                    size = whole
                try:
                    handle.write(line)
                    handle.flush()
                    os.fsync(handle.fileno())
                except OSError:
                    handle.truncate(size)
                    raise
        except OSError as error:
            raise write_error(path, error) from error
        return size

    def _truncate_history(self, size: int) -> None:
        with open(self.root / HISTORY, "r+b") as handle:
            handle.truncate(size)
            os.fsync(handle.fileno())

    def adopt_legacy_bundle(self) -> Version | None:
        """Make a bundle written before versions (``model/``, and ``exports/`` beside it) the
        first version, and promote it; returns that version, or None when there is none to
        adopt. The one step of the registry that moves folders that are already there."""
        if self.legacy_bundle() is None:
            return None
        with self._locked():
            legacy = self.legacy_bundle()
            if legacy is None:
                return None  # another process adopted it meanwhile
            created = legacy.stat().st_mtime

            def move(bundle: Path) -> dict[str, Any]:
                os.rename(legacy, bundle)
                exports = self.root / EXPORTS
                if exports.is_dir() and not exports.is_symlink():
                    os.rename(exports, bundle.parent / EXPORTS)
                return {"adopted": "a bundle written before model versions"}

            manifest = _read_json(self.root / "manifest.json") or {}
            version = self.add_version(
                manifest.get("fingerprint") or "legacy00", move, created=created
            )
            # (adopted as it is: it was the model in use, and refusing it would serve nothing)
            self._promote(
                version, "promote", "adopted the model of an earlier release", None, verify=False
            )
            return version


def _read_json(path: Path) -> dict[str, Any] | None:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError):
        return None
    return data if isinstance(data, dict) else None


def _creation_order(version: Version) -> tuple:
    """When ``version`` was made: its id's second, then the exact time (absent from versions
    of earlier releases), then the id."""
    created = version.info.get("created_time")
    exact = float(created) if isinstance(created, (int, float)) else 0.0
    return version.id[:16], exact, version.id


def _read_info(directory: Path) -> dict[str, Any] | None:
    if not (directory / BUNDLE).is_dir():
        return None
    return _read_json(directory / VERSION_FILE)


def _write_json(path: Path, data: dict[str, Any]) -> None:
    # whole or not at all, and not at all when the file holds the same already
    write_text_if_changed(path, json.dumps(data, indent=2, sort_keys=True, default=str) + "\n")
