"""Sentence means from each cached word's sum of piece vectors: the light path of ``embed``.

A sentence's embedding is the mean of its pieces' vectors, and with a word cache
(:mod:`psp_core.tokenization.word_piece_cache`) its pieces are the concatenation of its words' pieces. So the sum
over the sentence is the sum of its words' sums, and the mean is that divided by the number of
pieces. :class:`WordVectors` keeps, for each cached word, one row whose vector is the sum of the
word's (known) pieces, and averages a sentence by gathering one row per *word* instead of one
per *piece*, with no piece ids built at all:

* a word of one known piece uses that piece's own row of the embedding table (no memory);
* a word of several pieces gets a row of its own in an extension of the table, its pieces'
  sum (``capacity`` rows at most: :data:`DEFAULT_BUDGET_BYTES`, 32,768 words at dim 1024);
* a word of unknown pieces only uses a zero row (psp_core drops unknown pieces).

A sentence is averaged this way only when the result is what the piece path gives: every word
cached, safe (no near tie, no whitespace hazard: see :class:`~psp_core.tokenization.word_piece_cache.WordPieceCache`)
and with a row, at least one known piece other than the bare word-boundary piece ``▁`` (a
sentence with nothing else has nothing to embed; the piece path says so) and at most
``max_length`` pieces (truncation cuts inside a word). The others
are left to the piece path (:meth:`embed` returns them). The vectors equal the piece path's to
the table's rounding: float32 rounding for a float32 table (the sums are added in another
order); for a float16 table (``load_model(dtype="float16")``) each word's sum is itself stored
in float16, so the two paths agree to float16 rounding (a relative 1e-3; tested at 2e-3), not
float32's. Checked in ``tests/psp_core/inference/test_word_vectors.py``; the gain:
benchmarks/RESULTS.md#embed-speed.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from psp_core.inference.fast.pooling import weighted_sums
from psp_core.tokenization.csr import TokenBatch, row_sums
from psp_core.tokenization.word_piece_cache import WordPieceCache

#: memory for the sums of words of several pieces (rows beyond the vocabulary): 128 MiB
DEFAULT_BUDGET_BYTES = 128 << 20

_NO_ROW = -1


def extended_table(embeddings: np.ndarray, dtype, capacity: int) -> np.ndarray:
    """The embedding table followed by a zero row and ``capacity`` rows for word sums. The rows
    past the zero row are allocated but not written, so the memory they take grows with the
    words actually stored (the operating system maps pages on first write)."""
    vocab, dim = embeddings.shape
    table = np.empty((vocab + 1 + capacity, dim), dtype=dtype)
    table[:vocab] = embeddings
    table[vocab] = 0
    return table


class WordVectors:
    """Averages sentences word by word over ``table``, an :func:`extended_table`.

    Args:
        cache: the tokenizer's word cache (its rows are this class's words).
        table: the extended table (a numpy array); its first ``vocab_size`` rows are the model's
            embedding table.
        vocab_size: the sentencepiece vocabulary size.
        unk_id: the unknown piece (dropped from every word's sum).
        boundary_id: the bare word-boundary piece ``▁`` (None where the vocabulary has none).
        max_length: the most pieces a sentence may have on this path (0: no limit).
    """

    def __init__(
        self,
        cache: WordPieceCache,
        table: np.ndarray,
        *,
        vocab_size: int,
        unk_id: int,
        max_length: int,
        boundary_id: int | None = None,
    ) -> None:
        self.cache = cache
        self.table = table
        self.vocab_size = vocab_size
        self.unk_id = unk_id
        self.boundary_id = -1 if boundary_id is None else boundary_id
        self.max_length = max_length
        self.zero_row = vocab_size
        self.capacity = table.shape[0] - vocab_size - 1
        self.used = 0  # extension rows written
        self._row = np.zeros(0, dtype=np.int64)  # per cache row: its row in ``table``
        self._pieces = np.zeros(0, dtype=np.int64)  # per cache row: its known pieces
        # per cache row: its known pieces other than the bare boundary piece
        self._content = np.zeros(0, dtype=np.int64)

    def _sync(self) -> None:
        """Give the cache's rows added since the last call their table row and piece count."""
        table, unsafe = self.cache.tables()
        done = len(self._row)
        if done == len(table):
            return
        new = table.slice(done, len(table))  # the new rows' ids
        known = new.ids != self.unk_id
        pieces = row_sums(new.offsets, known)
        rows = np.full(len(new), _NO_ROW, dtype=np.int64)
        safe = ~unsafe[done:]  # (an unsafe word's texts go to sentencepiece: it needs no row)
        rows[safe & (pieces == 0)] = self.zero_row
        # a word of one known piece uses that piece's row: its id is the sum of the known ids
        single = safe & (pieces == 1)
        rows[single] = row_sums(new.offsets, np.where(known, new.ids, 0))[single]
        several = np.flatnonzero(safe & (pieces > 1))[: self.capacity - self.used]
        if len(several):
            rows[several] = self._store_sums(new.take(several))
        self._row = np.concatenate([self._row, rows])
        self._pieces = np.concatenate([self._pieces, pieces])
        content = row_sums(new.offsets, known & (new.ids != self.boundary_id))
        self._content = np.concatenate([self._content, content])

    def _store_sums(self, words: TokenBatch) -> np.ndarray:
        """Write the sums of ``words``' known pieces into the next extension rows."""
        known = (words.ids != self.unk_id).astype(np.float32)  # unknown pieces weigh nothing
        first = self.vocab_size + 1 + self.used
        weighted_sums(
            self.table[: self.vocab_size],
            words.ids,
            words.offsets,
            known,
            out=self.table[first : first + len(words)],
        )
        self.used += len(words)
        return np.arange(first, first + len(words), dtype=np.int64)

    def embed(self, texts: Sequence[str], out: np.ndarray, batch_size: int) -> np.ndarray:
        """Average normalized ``texts`` (lowercased, pre-tokenized) into ``out`` (float32
        ``[len(texts), dim]``); returns the indices of the texts left to the piece path (their
        rows of ``out`` are unspecified)."""
        word_rows, offsets, redo = self.cache.lookup(texts)
        self._sync()
        rows = self._row[word_rows]
        text_pieces = row_sums(offsets, self._pieces[word_rows])
        missing = np.flatnonzero(rows == _NO_ROW)
        if len(missing):
            redo[np.searchsorted(offsets, missing, side="right") - 1] = True
            rows[missing] = self.zero_row
        redo |= row_sums(offsets, self._content[word_rows]) == 0
        if self.max_length > 0:
            redo |= text_pieces > self.max_length
        scale = np.reciprocal(np.maximum(text_pieces, 1), dtype=np.float32)
        weights = np.repeat(scale, np.diff(offsets))
        for start in range(0, len(texts), batch_size):
            stop = min(start + batch_size, len(texts))
            low, high = offsets[start], offsets[stop]
            weighted_sums(
                self.table,
                rows[low:high],
                offsets[start : stop + 1] - low,
                weights[low:high],
                out=out[start:stop],
            )
        return np.flatnonzero(redo)
