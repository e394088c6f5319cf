"""The registry of evaluation suites, built-in ones first: what every consumer iterates
(the runner, the results, ``psp evaluate``, the plan, the scoreboard, the Dagster assets, the
gate). A suite registers itself with :func:`psp_core.evaluation.suite.register`."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import PurePosixPath

import psp_core.evaluation.suites  # noqa: F401  (registers the built-in suites, in order)
from psp_core.evaluation.suite import DevDataset, Suite, register, registry_so_far, unregister

#: a suite of your own joins after the built-in ones: register it through this module
#: (``psp_core.evaluation.register``), which has them registered first
__all__ = [
    "dev_dataset",
    "register",
    "registered",
    "suite_names",
    "suites_with_subsets",
    "unregister",
]


def registered() -> dict[str, Suite]:
    """Every suite, in the order registered (the built-in ones first)."""
    return registry_so_far()


def suite_names() -> tuple[str, ...]:
    return tuple(registered())


def suites_with_subsets() -> Iterator[Suite]:
    """The suites that have subsets to choose (``subset_option``)."""
    return (s for s in registered().values() if s.subset_option)


def dev_dataset(dev_sts: str | None) -> DevDataset | None:
    """The dataset named by ``dev_sts``, a path relative to the evaluation directory in its
    layout (``sts17/en-en.tsv``, ``sts/2014/OnWN.tsv``, ``stsb/dev.tsv``), as the suite whose
    file it is reads it; None when it names none of them (a file elsewhere matches no row)."""
    if not dev_sts:
        return None
    parts = PurePosixPath(dev_sts).parts
    for each in registered().values():
        found = each.dev_dataset(parts)
        if found is not None:
            return found
    return None
