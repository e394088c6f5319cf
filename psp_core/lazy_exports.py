"""Package attributes imported on first use (PEP 562).

A package's ``__init__`` that imports its submodules eagerly makes every ``import
psp_core.<anything>`` pay for torch; worker processes that only tokenize must not.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from typing import Any


def lazy_exports(
    package_globals: dict[str, Any], exports: Mapping[str, str]
) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """``(__getattr__, __dir__)`` for a package whose public ``name`` lives in module
    ``exports[name]``; a name is imported once, then cached in the package's globals."""
    package = package_globals["__name__"]

    def __getattr__(name: str) -> Any:
        module = exports.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(module), name)
        package_globals[name] = value
        return value

    def __dir__() -> list[str]:
        return sorted(set(package_globals) | set(exports))

    return __getattr__, __dir__
