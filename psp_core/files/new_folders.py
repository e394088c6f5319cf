"""Folders an output needed, made for it and taken back when it fails."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


@contextmanager
def parents_made(folder: Path) -> Iterator[None]:
    """Make ``folder`` and the parents it lacks; when the block fails (an error, Ctrl-C, a
    SIGTERM the CLI raises), remove those this made, deepest first, as long as they are empty:
    a failed ``psp embed --output-file new/a/b/v.npy`` leaves no ``new/``."""
    made, probe = [], folder
    while not probe.exists() and not probe.is_symlink() and probe != probe.parent:
        made.append(probe)
        probe = probe.parent
    folder.mkdir(parents=True, exist_ok=True)
    try:
        yield
    except BaseException:
        for path in made:  # deepest first
            try:
                path.rmdir()
            except OSError:  # something else is in it now: it stays
                break
        raise
