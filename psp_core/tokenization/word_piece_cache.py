"""Sentencepiece ids through a cache of each distinct word's pieces, identical to ``Encode``.

A unigram model that splits on whitespace (sentencepiece's default) segments a sentence word by
word: no piece crosses a space, so the best segmentation of the sentence is the best of each word,
one after the other. Encoding each distinct word once and reusing its ids is therefore exact, with
two exceptions this module detects and sends to sentencepiece whole:

* **near ties**: sentencepiece's Viterbi adds float32 piece scores from the start of the
  sentence, so when a word's two best segmentations score close to each other (``neiiiiin``:
  several equal ways to split a run of letters), rounding can pick the other one inside a
  sentence, and the more so the longer the sentence (a float32 sum of magnitude ``M`` is
  rounded in steps of ``ulp(M)``: 0.002 at 20,000, about 2,000 words). Each cached word records
  the gap between its two best segmentations (sentencepiece's 2-best list, scored with the
  pieces' scores) and its length; a sentence is encoded by sentencepiece when one of its words
  has a gap under :data:`TIE_GAP`, or under ``(characters + 2) x ulp(M)`` with ``M`` the
  sentence's total score (the bound on the rounding of either path through the word); a word
  of one piece is checked like any other;
* **whitespace the two disagree on**: a sentence with a character that the word splitter takes
  for whitespace but sentencepiece's normalization does not turn into a space (or the other way
  round, among the characters :func:`_whitespace_hazards` checks) is encoded by sentencepiece.

Anything else about the model that could break word independence (no whitespace splitting,
whitespace as a suffix, no dummy prefix, extra whitespace kept, user-defined pieces) turns the
cache off for that model (:func:`word_independent`). ``tests/psp_core/tokenization/test_word_piece_cache.py``
checks the ids against ``Encode`` on every sentence of the shared data.

A word's ids live in one growing CSR table (ids + offsets). A batch's texts are split into words
and the words made distinct by pyarrow (``utf8_split_whitespace``, whose whitespace is Python's
``str.isspace``, and ``dictionary_encode``), so only the batch's distinct words are looked up in a
dict, and the batch's ids are gathered with numpy: no per-word or per-piece Python work (faster
than ``str.split`` and a dict access per word; benchmarks/RESULTS.md#embed-speed). The cache
holds at most ``max_words`` words, each cached on its second sighting (see ``_rows_of``), and
at most ``max_bytes`` of memory (an estimate of the words, their ids and their index entries,
the words seen once included); a word longer than :data:`MAX_CACHED_WORD_CHARS` characters is
never cached nor remembered: whatever texts a server is sent, the cache stays within its bounds.
"""

from __future__ import annotations

import functools
import sys
from collections.abc import Sequence
from itertools import chain, repeat
from typing import NamedTuple

import numpy as np

from psp_core.tokenization.csr import TokenBatch, row_sums
from psp_core.tokenization.sentencepiece_spec import _UNIGRAM, SentencePieceSpec

#: the longest word the cache keeps (longer ones, rare in text, go to sentencepiece each time):
#: with the byte budget, what keeps a stream of long unique "words" from growing the cache
MAX_CACHED_WORD_CHARS = 64
#: the cache's memory when none is given (the words, their ids, the index, the words seen once)
DEFAULT_MAX_BYTES = 256 * 1024 * 1024
#: bytes of a cached word beside its string and ids: its index entry and its rows of the columns
_ENTRY_BYTES = 160
#: bytes of a word remembered as seen once, beside its string
_SEEN_BYTES = 80

#: a word whose two best segmentations score closer than this may segment differently inside a
#: sentence (float rounding of the running Viterbi score): such words go to sentencepiece
TIE_GAP = 1e-3

_EMPTY = 0  # the table's row for the empty word (between two whitespace characters)
_UNCACHED = 1  # the table's row for a word not cached


def word_independent(model_proto: bytes) -> bool:
    """Whether the sentencepiece model (its serialized bytes) segments each whitespace-separated
    word on its own: a unigram model that splits on whitespace, with a dummy prefix, extra
    whitespace removed, and no user-defined pieces (which may match across words)."""
    spec = SentencePieceSpec.parse(model_proto, pieces=False)
    return (
        spec.model_type == _UNIGRAM
        and spec.split_by_whitespace
        and not spec.treat_whitespace_as_suffix
        and not spec.allow_whitespace_only_pieces
        and spec.add_dummy_prefix
        and spec.remove_extra_whitespaces
        and not spec.user_defined
    )


#: every ``str.isspace`` character lies below this (the highest is U+3000; checked over the
#: whole range on the Python in use by tests/psp_core/tokenization/test_word_piece_cache.py): scanning 65,536
#: characters instead of 1,114,112 shortens every process's first model load
WHITESPACE_BELOW = 0x10000


@functools.cache
def _python_whitespace() -> list[str]:
    return [chr(c) for c in range(WHITESPACE_BELOW) if chr(c).isspace()]


def _whitespace_hazards(processor) -> str:
    """Characters on which ``str.split`` and sentencepiece's normalization disagree: Python
    whitespace that sentencepiece does not turn into a space, and characters that are not Python
    whitespace but that sentencepiece turns into one on its own (between two letters)."""
    hazards = []
    candidates = _python_whitespace() + ["\u200b", "\u2060", "\ufeff", "\u180e", "\u00ad"]
    split = processor.normalize("a b")
    for char in candidates:
        splits = processor.normalize(f"a{char}b") == split
        if splits != char.isspace():
            hazards.append(char)
    return "".join(hazards)


def _split_words(texts: Sequence[str]):
    """``texts`` split into words by pyarrow (its whitespace is ``str.isspace``) and made
    distinct: the texts as an arrow array, text ``i``'s words ``positions[offsets[i]:offsets[i +
    1]]``, each position an index into ``distinct`` (a list of str)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    array = _arrow_texts(texts, pa)
    word_lists = pc.utf8_split_whitespace(array)
    words = word_lists.flatten().dictionary_encode()
    offsets = _integers(word_lists.offsets, np.int32).astype(np.int64)
    return array, offsets, _integers(words.indices, np.int32), words.dictionary.to_pylist()


def _booleans(array) -> np.ndarray:
    """An arrow boolean array without nulls as numpy booleans (its bits unpacked)."""
    bits = np.unpackbits(np.frombuffer(array.buffers()[1], dtype=np.uint8), bitorder="little")
    return bits[array.offset : array.offset + len(array)].astype(bool)


def _integers(array, dtype) -> np.ndarray:
    """An arrow integer array without nulls as a numpy view of its values (``to_numpy`` would
    import pandas, where it is installed, the first time it runs)."""
    values = np.frombuffer(array.buffers()[1], dtype=dtype)
    return values[array.offset : array.offset + len(array)]


#: below this many texts, the arrow array is built from their UTF-8 bytes here: ``pa.array``
#: imports pandas, where it is installed, the first time it runs, which costs more than
#: embedding a line (``psp embed`` of one sentence)
_FEW_TEXTS = 16


def _arrow_texts(texts: Sequence[str], pa):
    """``texts`` as an arrow large-string array (int64 offsets: any size)."""
    if len(texts) >= _FEW_TEXTS:
        return pa.array(texts, type=pa.large_string())
    encoded = [text.encode("utf-8") for text in texts]
    offsets = np.zeros(len(encoded) + 1, dtype=np.int64)
    np.cumsum([len(data) for data in encoded], out=offsets[1:])
    return pa.LargeStringArray.from_buffers(
        len(encoded), pa.py_buffer(offsets), pa.py_buffer(b"".join(encoded))
    )


class _Column:
    """A numpy array that grows at its end (capacity doubled as needed): appending is amortized
    O(new values), and :meth:`view` costs nothing (a table rebuilt from a Python list after
    every batch of new words would cost a visible share of a pass over a corpus)."""

    def __init__(self, dtype, initial: Sequence) -> None:
        self._data = np.array(initial, dtype=dtype)
        self._size = len(self._data)

    def __len__(self) -> int:
        return self._size

    def last(self):
        return self._data[self._size - 1]

    def extend(self, values) -> None:
        values = np.asarray(values, dtype=self._data.dtype)
        end = self._size + len(values)
        if end > len(self._data):
            grown = np.empty(max(end, 2 * len(self._data), 1024), dtype=self._data.dtype)
            grown[: self._size] = self._data[: self._size]
            self._data = grown
        self._data[self._size : end] = values
        self._size = end

    def view(self) -> np.ndarray:
        return self._data[: self._size]


class WordRows(NamedTuple):
    """A batch of texts looked up in a :class:`WordPieceCache`: text ``i``'s words are
    ``rows[offsets[i]:offsets[i + 1]]``."""

    rows: np.ndarray  # int64: each word's row in the table (row 0: the empty word, no pieces)
    offsets: np.ndarray  # int64 [n_texts + 1]
    redo: np.ndarray  # bool per text: sentencepiece must encode it itself


class WordPieceCache:
    """Encode lowercased (and pre-tokenized) texts to sentencepiece ids, word by word.

    ``encode`` returns the same ids as ``processor.Encode(texts, out_type=int)``, flattened.
    """

    def __init__(
        self, processor, max_words: int = 2_000_000, max_bytes: int = DEFAULT_MAX_BYTES
    ) -> None:
        import pyarrow.compute  # noqa: F401  (imported here, not on the first lookup)

        self.processor = processor
        self.max_words, self.max_bytes = max_words, max_bytes
        hazards = _whitespace_hazards(processor)
        # an RE2 character class (pyarrow's regex engine) of the hazards, as \x{...} escapes
        self._hazard_pattern = (
            "[" + "".join(f"\\x{{{ord(c):x}}}" for c in hazards) + "]" if hazards else None
        )
        self._scores: list[float] | None = None  # each piece's score, read on first use
        self._clear()

    def _clear(self) -> None:
        # row 0 is the empty word (no pieces: the splitter gives one between two whitespace
        # characters); row 1 stands for a word that is not cached (unsafe: its text goes to
        # sentencepiece)
        self._index: dict[str, int] = {"": _EMPTY}
        self._offsets = _Column(np.int64, [0, 0, 0])  # row i's ids: flat[offsets[i]:offsets[i+1]]
        self._flat = _Column(np.int64, [])
        self._unsafe = _Column(bool, [False, True])
        # per row: its best segmentation's score, negated (a text's score grows by it), and its
        # gap to the second best over 2 x (its characters + 1) (see the module's docstring)
        self._weight = _Column(np.float64, [0.0, 0.0])
        self._limit = _Column(np.float64, [np.inf, np.inf])  # the margin x 2**23
        self._seen: set[str] = set()  # words seen once and not cached
        self.cached_bytes = 0  # the estimated memory of the cached words
        self.seen_bytes = 0  # ... and of the words seen once

    def __len__(self) -> int:
        return len(self._index) - 1

    def _add(self, words: list[str]) -> None:
        """Encode ``words`` (new, distinct) and append them to the table, with what tells whether
        a text holding one may use it (see the module's docstring): sentencepiece's 2-best list
        gives both the ids (its best) and the gap to the second best."""
        best, weights, margins, unsafe = [], [], [], []
        scores = self._piece_scores()
        for word, nbest in zip(words, self.processor.NBestEncode(words, nbest_size=2, out_type=int),
                               strict=True):  # fmt: skip
            ids = nbest[0]
            score = sum(map(scores.__getitem__, ids))
            gap = score - sum(map(scores.__getitem__, nbest[1])) if len(nbest) > 1 else np.inf
            best.append(ids)
            weights.append(-score)
            # (at most one piece per character, plus the word's "▁"; normalization may expand a
            # character: NFKC turns "ﬁ" into "fi")
            margins.append(gap / (2 * (len(word) + 1)))
            unsafe.append(gap < TIE_GAP)
        base = len(self._unsafe)
        self._index.update(zip(words, range(base, base + len(words)), strict=True))
        lengths = np.fromiter(map(len, best), dtype=np.int64, count=len(best))
        self.cached_bytes += sum(map(sys.getsizeof, words)) + int(lengths.sum()) * 8
        self.cached_bytes += _ENTRY_BYTES * len(words)
        self._offsets.extend(self._offsets.last() + np.cumsum(lengths))
        self._flat.extend(np.fromiter(chain.from_iterable(best), np.int64, int(lengths.sum())))
        self._unsafe.extend(unsafe)
        self._weight.extend(weights)
        self._limit.extend(np.asarray(margins) * 2.0**23)

    def _piece_scores(self) -> list[float]:
        """Each piece's score as sentencepiece's Viterbi uses it (the unknown piece: the lowest
        score minus 10, sentencepiece's kUnkPenalty)."""
        if self._scores is None:
            processor = self.processor
            scores = [processor.GetScore(i) for i in range(processor.GetPieceSize())]
            scores[processor.unk_id()] = min(scores) - 10.0
            self._scores = scores
        return self._scores

    def tables(self) -> tuple[TokenBatch, np.ndarray]:
        """The table as arrays: each row's ids (row ``i`` of the batch is the table's row
        ``i``), and whether each row is unsafe in any text (a near tie: sentencepiece must
        encode a text holding it). Views of the current table: call again after new words."""
        return TokenBatch(self._flat.view(), self._offsets.view()), self._unsafe.view()

    def _too_close_for(self, rows: np.ndarray, offsets: np.ndarray) -> np.ndarray:
        """Per text (words ``rows[offsets[i]:offsets[i + 1]]``): whether one of its words' gap
        to its second-best segmentation is within the rounding of the text's float32 score:
        ``margin <= ulp(M)``, tested as ``M >= margin x 2**23`` (``ulp(M) <= M x 2**-23``)."""
        magnitude = row_sums(offsets, self._weight.view()[rows])
        tightest = np.minimum.reduceat(np.append(self._limit.view()[rows], np.inf), offsets[:-1])
        tightest[offsets[:-1] == offsets[1:]] = np.inf  # (reduceat gives an empty text a value)
        return magnitude >= tightest

    def _rows_of(self, words: list[str], counts: np.ndarray) -> np.ndarray:
        """The rows of distinct ``words`` (seen ``counts`` times in this batch), or
        :data:`_UNCACHED`. A word is cached on its second sighting (twice in this batch, or once
        before): a word seen only once costs a cache entry (its ids and its 2-best check) and
        saves nothing, and most distinct words of a corpus are seen once. A full table
        (``max_words``) takes no more words; their texts go to sentencepiece, so a stream of new
        words never makes encoding slower than sentencepiece alone."""
        # (a list first: numpy's fromiter over a map is slower here)
        rows = np.array(list(map(self._index.get, words, repeat(-1))), dtype=np.int64)
        missing = np.flatnonzero(rows < 0)
        if len(missing):
            seen, longest = self._seen, MAX_CACHED_WORD_CHARS
            short = [i for i in missing if len(words[i]) <= longest]  # (long ones: never kept)
            worth = [words[i] for i in short if counts[i] > 1 or words[i] in seen]
            room = self.max_words - len(self)
            if worth and room > 0 and self.cached_bytes < self.max_bytes:
                worth = worth[:room]
                self._add(worth)
                seen.difference_update(worth)
                self.seen_bytes = max(0, self.seen_bytes - self._seen_cost(worth))
            if len(seen) > self.max_words or self.seen_bytes > self.max_bytes // 4:
                seen.clear()
                self.seen_bytes = 0
            get = self._index.get
            rows[missing] = [get(words[i], _UNCACHED) for i in missing]
            new = [words[i] for i in short if rows[i] == _UNCACHED and words[i] not in seen]
            seen.update(new)
            self.seen_bytes += self._seen_cost(new)
        return rows

    @staticmethod
    def _seen_cost(words: list[str]) -> int:
        return sum(map(sys.getsizeof, words)) + _SEEN_BYTES * len(words)

    def lookup(self, texts: Sequence[str]) -> WordRows:
        """Each text's words as rows of the table, and which texts sentencepiece must encode
        itself (a word not cached or near a tie, a whitespace hazard)."""
        import pyarrow.compute as pc

        array, offsets, positions, distinct = _split_words(texts)
        counts = np.bincount(positions, minlength=len(distinct))
        rows = self._rows_of(distinct, counts)[positions]
        redo = self._too_close_for(rows, offsets) if len(texts) else np.zeros(0, dtype=bool)
        unsafe_words = np.flatnonzero(self._unsafe.view()[rows])
        if len(unsafe_words):
            redo[np.searchsorted(offsets, unsafe_words, side="right") - 1] = True
        if self._hazard_pattern is not None:
            hazard = pc.match_substring_regex(array, self._hazard_pattern)
            redo |= _booleans(hazard)
        return WordRows(rows, offsets, redo)

    def probe(self, texts: Sequence[str]) -> int:
        """How many of ``texts`` the cache could serve once it has learned what it has seen:
        every word cached or seen before (near ties and whitespace hazards aside). Nothing is
        encoded or cached, so a probe costs a lookup; the texts' new words are remembered as
        seen, so that a workload that comes back finds them.

        Split by ``str.split`` (the same whitespace, ``str.isspace``, as :func:`_split_words`),
        not pyarrow: a probe is a few hundred texts, and a process's first ``pa.array`` imports
        pandas (a visible share of one pass over a corpus whose blocks only probe)."""
        if not texts:
            return 0
        index, seen = self._index, self._seen
        words = [text.split() for text in texts]
        new = {word for word in chain.from_iterable(words) if word not in index} - seen
        kept = [word for word in new if len(word) <= MAX_CACHED_WORD_CHARS]
        if len(seen) < self.max_words and self.seen_bytes < self.max_bytes // 4:
            seen.update(kept)
            self.seen_bytes += self._seen_cost(kept)
        return sum(1 for text_words in words if new.isdisjoint(text_words))

    def encode(self, texts: Sequence[str]) -> TokenBatch:
        return self.encode_counted(texts)[0]

    def encode_counted(self, texts: Sequence[str]) -> tuple[TokenBatch, int]:
        """The ids of ``texts``, and how many of them the cache served (without sentencepiece)."""
        if not texts:
            return TokenBatch.empty(), 0
        word_rows, word_offsets, redo = self.lookup(texts)
        pieces = self.tables()[0].take(word_rows)  # each word's ids, one word after the other
        batch = TokenBatch(pieces.ids, pieces.offsets[word_offsets])
        redone = np.flatnonzero(redo)
        if len(redone):
            batch = self._splice(batch, texts, redone)
        return batch, len(texts) - len(redone)

    def _splice(self, batch: TokenBatch, texts: Sequence[str], rows: np.ndarray) -> TokenBatch:
        """``batch`` with ``rows`` replaced by sentencepiece's own encoding of those texts."""
        id_lists = self.processor.Encode([texts[i] for i in rows], out_type=int)
        lengths = np.fromiter(map(len, id_lists), dtype=np.int64, count=len(id_lists))
        redone = TokenBatch(
            np.fromiter(chain.from_iterable(id_lists), dtype=np.int64, count=int(lengths.sum())),
            np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64),
        )
        if len(rows) == len(texts):
            return redone
        keep = np.ones(len(batch), dtype=bool)
        keep[rows] = False
        kept_rows = np.flatnonzero(keep)
        # rows of concat(kept, redone), in the original order
        order = np.empty(len(batch), dtype=np.int64)
        order[kept_rows] = np.arange(len(kept_rows))
        order[rows] = len(kept_rows) + np.arange(len(rows))
        return TokenBatch.concat([batch.take(kept_rows), redone]).take(order)
