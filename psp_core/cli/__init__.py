"""The ``psp`` command line: one module per subcommand (its parser and what it runs), the
argument types they share, and the readers and writers of ``psp embed``'s corpora.

``main`` is imported on first use, so that a subcommand's module does not import every other.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from psp_core.lazy_exports import lazy_exports

if TYPE_CHECKING:
    from psp_core.cli import main

__all__ = ["main"]
__getattr__, __dir__ = lazy_exports(globals(), {"main": "psp_core.cli.main"})
