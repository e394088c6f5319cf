"""Fresh virtual environments for the install tests, without the network: the distributions
installed here, linked into a folder the venv reads through a ``.pth`` file."""

from __future__ import annotations

from importlib import metadata
from pathlib import Path


def link_distributions(names: set[str], folder: Path) -> None:
    """Links in ``folder`` to the files of the installed distributions ``names`` (top-level
    packages, their libraries and metadata): the same versions as here, without the network."""
    folder.mkdir()
    for name in names:
        distribution = metadata.distribution(name)
        for top in {Path(str(file)).parts[0] for file in distribution.files or []}:
            source = Path(distribution.locate_file(top))
            if top != ".." and source.exists() and not (folder / top).exists():
                (folder / top).symlink_to(source)
