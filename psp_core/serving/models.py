"""The models a server answers with, each swapped for a newly promoted version while it runs.

A served name maps to a folder: a language's model registry (:mod:`psp_core.models.registry`, whose
``promoted`` link is followed) or a plain bundle. A watcher thread looks at each folder every
``interval`` seconds; when the promoted version changed it loads the new model beside the old
one, then replaces the reference in one assignment. A request holds the model it started with
until it ends, so none fails or mixes two models during a swap.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from psp_core.inference.model import PSPModel, load_model
from psp_core.models.registry import PROMOTED, ModelRegistry

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Served:
    """One loaded model: ``version`` is the registry version id (or the bundle's folder name)."""

    name: str
    version: str
    model: PSPModel
    loaded_at: float


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


def _version_of(folder: Path) -> tuple[str, Path] | None:
    """``(version id, bundle path)`` of what ``folder`` serves now (a bundle, or a registry's
    promoted version: a bundle of an earlier release there is adopted); None when it has none."""
    if (folder / "config.json").is_file():
        return folder.name, folder
    promoted = ModelRegistry(folder).promoted()
    return None if promoted is None else (promoted.id, promoted.bundle)


class ModelSet:
    """The served models by name, reloaded when their promoted version changes."""

    def __init__(self, folders: dict[str, Path], *, num_threads: int = 1) -> None:
        if not folders:
            raise ValueError("no models to serve")
        self.folders = {name: Path(path) for name, path in folders.items()}
        self.num_threads = num_threads
        self._served: dict[str, Served] = {}
        self._stop = threading.Event()
        self._watcher: threading.Thread | None = None
        self.swaps = 0
        for name in self.folders:
            self._refresh(name)
        if not self._served:
            raise ValueError(f"none of {sorted(self.folders)} has a model to serve yet")

    def get(self, name: str) -> Served | None:
        return self._served.get(name)

    def names(self) -> list[str]:
        return sorted(self._served)

    def watch(self, interval: float) -> None:
        """Check every folder every ``interval`` seconds, on a daemon thread, until :meth:`stop`."""
        if self._watcher is not None:
            return

        def loop() -> None:
            while not self._stop.wait(interval):
                for name in self.folders:
                    try:
                        self._refresh(name)
                    except Exception:  # a damaged new version: keep serving the current one
                        log.exception(
                            "%s: could not load its new version; still serving the old", name
                        )

        self._watcher = threading.Thread(target=loop, name="psp-model-watch", daemon=True)
        self._watcher.start()

    def stop(self) -> None:
        self._stop.set()
        if self._watcher is not None:
            self._watcher.join()

    def _refresh(self, name: str) -> None:
        found = _version_of(self.folders[name])
        current = self._served.get(name)
        if found is None or (current is not None and current.version == found[0]):
            return
        version, bundle = found
        started = time.perf_counter()
        model = load_model(bundle, num_threads=self.num_threads)
        model.embed(["warm up"])  # the first call's one-time costs, before any request
        self._served[name] = Served(name, version, model, time.time())  # one assignment
        if current is not None:
            self.swaps += 1
        log.info(
            "%s: serving version %s (loaded in %.1f s)%s",
            name,
            version,
            time.perf_counter() - started,
            f", was {current.version}" if current else "",
        )
