"""Optional dependencies: the package's extras (``[project.optional-dependencies]`` in
pyproject.toml) and the one line a user gets when a command needs one that is not installed.

A plain ``pip install`` of the package brings what embedding needs (``load_model``, ``embed``,
``psp embed``, ``psp score``, ``psp info``, Parquet corpora included); training, the pipeline
and serving come with extras, imported only by the code that needs them.
"""

from __future__ import annotations

import functools
import importlib
from types import ModuleType

#: the distribution's name (``[project] name`` in pyproject.toml)
PACKAGE = "psp-pipeline"


class MissingExtra(ImportError):
    """A command or function needs an extra that is not installed; the message is one line
    naming the extra and the command that installs it."""

    def __init__(self, what: str, extra: str) -> None:
        super().__init__(f"{what} needs the [{extra}] extra: pip install '{PACKAGE}[{extra}]'")
        self.extra = extra


def require(module: str, extra: str, what: str) -> ModuleType:
    """Import ``module``, or raise :class:`MissingExtra` saying that ``what`` needs ``extra``
    when the module (or a module it needs) is not installed."""
    try:
        return importlib.import_module(module)
    except ModuleNotFoundError as error:
        raise MissingExtra(what, extra) from error


@functools.cache
def optional_module(module: str) -> ModuleType | None:
    """``module``, or ``None`` where it (or a module it needs) is not installed (asked once a
    process: a missing module is not looked for again on every call)."""
    try:
        return importlib.import_module(module)
    except ImportError:
        return None


def torch_module() -> ModuleType | None:
    """torch, or ``None`` where it is not installed (an install without the training extra)."""
    return optional_module("torch")
