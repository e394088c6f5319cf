"""Whether the word cache pays for itself, decided block by block from what it served.

The word cache (:mod:`psp_core.tokenization.word_piece_cache`) and the word sums (:mod:`psp_core.inference.fast.word_vectors`)
make sentences whose every word is cached much cheaper than sentencepiece; but looking a
block's words up costs a good part of encoding it, and filling the cache costs a 2-best check
per new word. Embedding sentences again and again (a benchmark, a server's queries, a second
pass) fills the cache once and then serves nearly every sentence;
one pass over a corpus of distinct sentences fills it with words that mostly never come back,
and leaves most sentences to sentencepiece anyway (a word seen once is not cached), so there
the cache only adds its costs (benchmarks/RESULTS.md#embed-corpus).

:class:`CachePolicy` watches the share of sentences the cache served. While it is at least
:data:`STAY` the cache takes whole blocks; below that, blocks go to sentencepiece alone, and a probe of
:data:`PROBE_SENTENCES` sentences per block, spread over it, only counts the sentences the
cache could serve (every word cached or seen before:
:meth:`~psp_core.tokenization.word_piece_cache.WordPieceCache.probe`, a lookup, no encoding) and remembers their
new words; at :data:`RETURN` or more the cache is tried on the first :data:`TRIAL_SENTENCES`
sentences of the next block (the rest goes to sentencepiece). A trial serving at least
:data:`HOLD_FLOOR` gives the cache whole blocks again, kept for the next :data:`HOLD_BLOCKS`
blocks (a probe saw only its own sentences: the cache needs a pass over the rest to learn their
words) unless one serves under :data:`HOLD_FLOOR`; a trial or a held block serving less means
the words are not coming back (a second pass over a large corpus, whose first probes fall on
the sentences probed the first time), and the cache is left. After each exit the probes move to
other sentences of each block. A new model starts probing, so a corpus's first block costs a
probe rather than a full fill. The vectors and ids are the same either way; only the speed
differs.
"""

from __future__ import annotations

import numpy as np

#: the share of sentences served below which blocks leave the cache
STAY = 0.5
#: the share of a probe's sentences served from which blocks take the cache again
RETURN = 0.8
#: sentences of a block that still go through the cache while it is left
PROBE_SENTENCES = 256
#: blocks the cache keeps once it is taken back, whatever their share: time to learn the words
#: of a workload that comes back (a probe only sees a few sentences of each block)
HOLD_BLOCKS = 4
#: a held block serving less than this share leaves the cache at once: the workload's words are
#: not coming back (the floor lies between what a held block of repeated sentences serves and
#: what one of a second pass over a large corpus does: benchmarks/RESULTS.md#embed-corpus)
HOLD_FLOOR = 0.3
#: sentences of a block that try the cache when a probe says it would pay: a wrong guess (a
#: second pass over a corpus) costs filling the cache with their words, not a whole block's
#: (whole blocks made such a pass slower than the cache off: benchmarks/RESULTS.md#embed-corpus)
TRIAL_SENTENCES = 1024
_PROBE_SHIFT = 7  # rows the probe moves by, per exit, within the spacing of its sentences


class CachePolicy:
    """The cache's recent share of sentences served, and the choice it implies."""

    def __init__(self) -> None:
        # a fresh model probes first: a corpus's first block pays a probe, not a full fill
        self.use_cache = False
        self.trial = False  # a probe said the cache would pay: the next block tries it
        self.hold = 0  # blocks left that keep the cache whatever their share
        self.served = 0  # sentences the cache served, and sentences it was given: statistics
        self.given = 0
        self.exits = 0  # times the cache was left for serving too little

    def taken(self, count: int) -> tuple[int, int]:
        """The rows ``(start, stop)`` of a block of ``count`` sentences that go through the
        cache (a probe aside): all while it pays or where the block is no bigger than a probe
        (then the block is the probe); on trial :data:`TRIAL_SENTENCES` of them, at a place
        that moves after each exit (a trial's sentences are learned: tried again, they would
        pass whatever the rest of the workload does); else none."""
        if self.use_cache or count <= PROBE_SENTENCES:
            return 0, count
        if not self.trial:
            return 0, 0
        size = min(count, TRIAL_SENTENCES)
        start = (self.exits * size) % (count - size + 1)
        return start, start + size

    def probe_rows(self, count: int) -> np.ndarray | None:
        """The rows of a block of ``count`` sentences to probe, spread evenly over it; None
        when the block needs no probe (some of it goes through the cache: :meth:`taken`)."""
        start, stop = self.taken(count)
        if stop > start:
            return None
        rows = np.linspace(0, count - 1, PROBE_SENTENCES).astype(np.int64)
        # after each exit the probe moves to other sentences of the block: the sentences probed
        # before have every word seen by definition, so a workload that comes back (a second
        # pass over a corpus) would find them all known and take the cache again however little
        # it then serves
        spacing = count // PROBE_SENTENCES
        return (rows + (self.exits * _PROBE_SHIFT) % spacing) % count

    def probed(self, servable: int, given: int) -> None:
        """A probe found ``servable`` of ``given`` sentences made of words cached or seen."""
        self._count(servable, given)
        if given:
            self.trial = servable / given >= RETURN

    def block_served(self, served: int, given: int) -> None:
        """``given`` sentences of a block went through the cache (:meth:`taken`), which served
        ``served`` of them without sentencepiece (a block taken while the cache is left is no
        bigger than a probe, and counts as one)."""
        if self.trial:  # (a trial, or a small block on trial: the same test)
            self._count(served, given)
            if given:
                self.trial = False
                self.use_cache = served / given >= HOLD_FLOOR
                self.hold = HOLD_BLOCKS if self.use_cache else 0
                self.exits += not self.use_cache
            return
        if not self.use_cache:
            self.probed(served, given)
            return
        self._count(served, given)
        if not given:
            return
        if self.hold > 0 and served / given >= HOLD_FLOOR:
            self.hold -= 1
        elif served / given < STAY:
            self.hold = 0
            self.use_cache = False
            self.exits += 1

    def _count(self, served: int, given: int) -> None:
        self.served += served
        self.given += given
