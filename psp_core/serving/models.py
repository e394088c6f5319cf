"""The models a server answers with, each swapped for a newly promoted version while it runs.

A served name maps to a folder: a language's model registry (:mod:`psp_core.models.registry`, whose
``promoted`` link is followed) or a plain bundle. A watcher thread looks at each folder every
``interval`` seconds; when the promoted version changed it loads the new model beside the old
one (loading verifies the bundle: :func:`psp_core.models.bundle.load_bundle`), then replaces the
reference in one assignment. A request holds the model it started with until it ends, so none
fails or mixes two models during a swap.

What the watcher cannot serve is a *problem* of that name, shown by ``/health`` and logged once
when it appears (and once when it clears), never on every tick:

* a promoted version that does not load: the old model goes on serving; the load is not tried
  again until the version's files change (their size, modification time or inode);
* a ``promoted`` link that points nowhere (its version folder deleted);
* the served version's files deleted or changed on disk: the copy in memory goes on serving,
  but a restart (or a replaced worker) could not load it. Each tick compares the files' size,
  modification time and inode with those seen at load; only a change costs a full verification.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from psp_core.inference.model import PSPModel, load_model
from psp_core.models.bundle import verify_bundle
from psp_core.models.bundle_config import CONFIG_FILE, EMBEDDINGS_FILE, SPM_FILE, BundleError
from psp_core.models.registry import PROMOTED, VERSIONS, ModelRegistry
from psp_core.serving.limits import Limits

log = logging.getLogger(__name__)

#: errors that say a bundle cannot be loaded (a damaged or missing file, a bad config), whose
#: message is the reason; any other is named by its type too (its traceback logged at debug)
LOAD_ERRORS = (BundleError, OSError, ValueError)


@dataclass(frozen=True)
class Served:
    """One loaded model: ``version`` is the registry version id (or the bundle's folder name);
    ``bundle`` the folder it was loaded from and ``files`` what its files looked like then."""

    name: str
    version: str
    model: PSPModel
    loaded_at: float
    bundle: Path | None = None
    files: tuple = ()


def discover(storage_root: str | Path) -> dict[str, Path]:
    """Every ``{root}/{name}/psp_model`` registry with a promoted version (languages, ``multi``)."""
    found = {}
    root = Path(storage_root)
    if not root.is_dir():
        return found
    for folder in sorted(root.iterdir()):
        registry = folder / "psp_model"
        if (registry / PROMOTED).is_symlink() or (registry / "model").is_dir():
            found[folder.name] = registry
    return found


class NothingPromoted(Exception):
    """A registry's ``promoted`` link points to a version that is not there (the message says
    which)."""


def _version_of(folder: Path) -> tuple[str, Path] | None:
    """``(version id, bundle path)`` of what ``folder`` serves now (a bundle, a registry's
    promoted version, or the ``model/`` bundle of an earlier release, served where it is: the
    server moves nothing); None when it has none.

    Raises:
        NothingPromoted: the ``promoted`` link points nowhere.
    """
    if (folder / CONFIG_FILE).is_file():
        return folder.name, folder
    registry = ModelRegistry(folder)
    promoted = registry.promoted()
    legacy = registry.legacy_bundle()
    if promoted is None and legacy is not None and (legacy / CONFIG_FILE).is_file():
        return legacy.name, legacy
    if promoted is None and (folder / PROMOTED).is_symlink():
        target = os.readlink(folder / PROMOTED)
        if not (folder / VERSIONS / Path(target).name).is_dir():
            raise NothingPromoted(f"{folder / PROMOTED} points to {target}, which is not there")
    return None if promoted is None else (promoted.id, promoted.bundle)


def _holds_nothing(folder: Path) -> str:
    """Why ``folder`` serves nothing when it has no problem to show: what it lacks."""
    return (
        f"{folder} holds neither a model bundle ({CONFIG_FILE} is missing) nor a promoted "
        f"version ({PROMOTED} -> {VERSIONS}/ID, written by psp_model or psp models promote)"
    )


def file_states(bundle: Path) -> tuple:
    """Size, modification time and inode of a bundle's files (None for a missing one): a
    change says the files were replaced or written since."""
    states = []
    for name in (CONFIG_FILE, SPM_FILE, EMBEDDINGS_FILE):
        try:
            status = os.stat(bundle / name)
        except OSError:
            states.append((name, None))
            continue
        states.append((name, status.st_size, status.st_mtime_ns, status.st_ino))
    return tuple(states)


class ModelSet:
    """The served models by name, reloaded when their promoted version changes; what stops a
    name from being served as promoted is in :meth:`problems`."""

    def __init__(
        self,
        folders: dict[str, Path],
        *,
        num_threads: int = 1,
        word_cache_bytes: int = Limits.word_cache_bytes,
    ) -> None:
        if not folders:
            raise ValueError("no models to serve")
        self.folders = {name: Path(path) for name, path in folders.items()}
        self.num_threads = num_threads
        # the process's budget shared by its models (a swap briefly holds two of one name)
        self.word_cache_bytes = max(1, word_cache_bytes // len(self.folders))
        self._served: dict[str, Served] = {}
        self._problems: dict[str, str] = {}
        #: per name, what was last checked (a version and its files) and the problem found: the
        #: same state is not loaded or verified again
        self._checked: dict[str, tuple[tuple, str | None]] = {}
        self._stop = threading.Event()
        self._watcher: threading.Thread | None = None
        self.swaps = 0
        for name in self.folders:
            self._refresh(name, starting=True)
        if not self._served:
            why = "; ".join(
                f"{name}: {self._problems.get(name) or _holds_nothing(folder)}"
                for name, folder in self.folders.items()
            )
            raise ValueError(f"none of {sorted(self.folders)} has a model to serve yet ({why})")

    def get(self, name: str) -> Served | None:
        return self._served.get(name)

    def names(self) -> list[str]:
        return sorted(self._served)

    def problems(self) -> dict[str, str]:
        """Each name whose promoted model is not what it serves, or whose served files are
        gone or damaged on disk, with one line saying so; paths are given from the name's
        folder (``de/versions/...``): ``/health`` answers without a key, and the folders'
        place on the server's disk is none of a client's business (the log has them whole)."""
        shown = {}
        for name, problem in list(self._problems.items()):
            folder = self.folders[name]
            for prefix in {str(folder.resolve()), str(folder)}:
                problem = problem.replace(prefix, name)
            shown[name] = problem
        return shown

    def watch(self, interval: float) -> None:
        """Check every folder every ``interval`` seconds, on a daemon thread, until :meth:`stop`."""
        if self._watcher is not None:
            return

        def loop() -> None:
            while not self._stop.wait(interval):
                for name in self.folders:
                    self._refresh(name)

        self._watcher = threading.Thread(target=loop, name="psp-model-watch", daemon=True)
        self._watcher.start()

    def stop(self) -> None:
        self._stop.set()
        if self._watcher is not None:
            self._watcher.join()

    def _refresh(self, name: str, *, starting: bool = False) -> None:
        """Swap in a newly promoted version of ``name``, or note why it cannot be; at the
        start a model that does not load is an error (nothing would serve it)."""
        try:
            problem = self._check(name, starting)
        except Exception as error:
            if starting:
                raise
            problem = f"the model watch failed ({type(error).__name__}: {error})"
            log.debug("%s: the model watch failed", name, exc_info=True)
        previous = self._problems.get(name)
        if problem is not None:
            self._problems[name] = problem  # (replaced in one step: /health never sees it gone)
            if problem != previous:
                log.error("%s: %s", name, problem)
        elif previous is not None:
            del self._problems[name]
            current = self._served.get(name)
            log.info("%s: resolved, serving %s", name, current.version if current else "nothing")

    def _check(self, name: str, starting: bool) -> str | None:
        current = self._served.get(name)
        serving = f"still serving {current.version} from memory" if current else "nothing served"
        try:
            found = _version_of(self.folders[name])
        except NothingPromoted as error:
            return f"{error}; {serving}"
        if found is None:
            if current is None:
                return None  # nothing promoted yet: served once something is
            return self._check_files(current)
        version, bundle = found
        if current is not None and current.version == version:
            return self._check_files(current)
        state = ("load", version, file_states(bundle))
        last = self._checked.get(name)
        if last is not None and last[0] == state:
            return last[1]  # this version failed to load as it is: not tried again
        try:
            self._load(name, version, bundle)
        except Exception as error:
            if starting:
                raise
            why = (
                str(error) if isinstance(error, LOAD_ERRORS) else f"{type(error).__name__}: {error}"
            )
            log.debug("%s: loading version %s failed", name, version, exc_info=True)
            problem = f"version {version} cannot be loaded ({why}); {serving}"
            self._checked[name] = (state, problem)
            return problem
        self._checked.pop(name, None)
        return None

    def _check_files(self, current: Served) -> str | None:
        """None while the served version's files are as loaded (or verify again after a
        change); otherwise what a restart would meet."""
        if current.bundle is None:
            return None
        states = file_states(current.bundle)
        if states == current.files:
            return None
        state = ("files", current.version, states)
        last = self._checked.get(current.name)
        if last is not None and last[0] == state:
            return last[1]
        try:
            config = verify_bundle(current.bundle)
        except LOAD_ERRORS as error:
            problem = f"the files of version {current.version} do not verify"
            problem += f" ({error}); still serving it from memory, a restart could not load it"
        else:
            problem = None
            if config.files != current.model.config.files:
                problem = (
                    f"the files of version {current.version} were replaced on disk by another "
                    "bundle; still serving the one loaded"
                )
        self._checked[current.name] = (state, problem)
        return problem

    def _load(self, name: str, version: str, bundle: Path) -> None:
        current = self._served.get(name)
        started = time.perf_counter()
        files = file_states(bundle)  # before reading: a change while loading is seen next tick
        model = load_model(  # (half the budget for the words' pieces, half for their sums)
            bundle,
            num_threads=self.num_threads,
            word_cache_bytes=self.word_cache_bytes // 2,
            word_vector_bytes=self.word_cache_bytes // 2,
        )
        model.embed(["warm up"])  # the first call's one-time costs, before any request
        served = Served(name, version, model, time.time(), bundle.resolve(), files)
        self._served[name] = served  # one assignment
        if current is not None:
            self.swaps += 1
        log.info(
            "%s: serving version %s (loaded in %.1f s)%s",
            name,
            version,
            time.perf_counter() - started,
            f", was {current.version}" if current else "",
        )
