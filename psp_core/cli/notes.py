"""What ``psp`` says about its input besides errors: one line each, naming the file and line.

A library call warns in its own terms (``EmptySentenceWarning``: "index 35" of a list of a
chunk); a command knows which file and line that index came from. :class:`EmptySentences`
collects those warnings over a command's calls and logs one line at the end, with the count and
the first file and line, instead of Python's warning text (its source line included) for each
chunk. Every other warning passes through unchanged.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from psp_core.inference.model import EmptySentenceWarning, collecting_empty_sentences

log = logging.getLogger("psp")


class EmptySentences:
    """The sentences (or pairs, lines) with nothing to embed a command met, noted once."""

    def __init__(
        self, what: str = "sentences", consequence: str = "their vectors are zero"
    ) -> None:
        self.what, self.consequence = what, consequence
        self.count, self.first = 0, None

    @contextmanager
    def counting(self, where: Callable[[int], str]) -> Iterator[None]:
        """Count the empty sentences of the calls inside; ``where(i)`` is the file and line of
        the ``i``-th item of those calls' list (a pair counts once, whichever side is empty;
        a warning that names its file itself, ``source``, is placed by its line)."""
        found: list[EmptySentenceWarning] = []
        with collecting_empty_sentences(found):
            yield
        for warning in found:
            if warning.source is not None:  # (a whole file's lines)
                self._add(len(warning.indices), f"{warning.source}:{int(warning.indices[0]) + 1}")
        empty = {int(i) for w in found if w.source is None for i in w.indices}
        if empty:
            self._add(len(empty), where(min(empty)))

    def _add(self, count: int, first: str) -> None:
        self.count += count
        self.first = self.first or first

    def note(self) -> None:
        if self.count:
            log.warning(
                "%d %s have nothing to embed (empty, or no piece the vocabulary knows; first: "
                "%s): %s",
                self.count,
                self.what if self.count != 1 else self.what.removesuffix("s"),
                self.first,
                self.consequence,
            )
