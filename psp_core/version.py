"""The installed distribution's version, ``psp_core.__version__``."""

from __future__ import annotations

from importlib import metadata

try:
    __version__ = metadata.version("psp-pipeline")
except metadata.PackageNotFoundError:  # a checkout on the path, never installed
    __version__ = "0+unknown"
