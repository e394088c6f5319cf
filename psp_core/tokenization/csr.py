"""Sentences as flat ids plus offsets (CSR rows), and the few row operations training and the
word cache need."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np


def row_sums(offsets: np.ndarray, values: np.ndarray) -> np.ndarray:
    """Per CSR row (``values[offsets[i]:offsets[i + 1]]``), the sum of ``values``: one cumulative
    sum read at the offsets, so an empty row sums to 0 (integers and booleans sum as int64,
    floats as float64)."""
    before = np.zeros(len(values) + 1, dtype=np.result_type(values.dtype, np.int64))
    np.cumsum(values, out=before[1:])
    return np.diff(before[offsets])


@dataclass(frozen=True)
class TokenBatch:
    """Sentences as flat ids plus offsets: sentence ``i`` is ``ids[offsets[i]:offsets[i+1]]``."""

    ids: np.ndarray  # int64 [n_tokens]
    offsets: np.ndarray  # int64 [n_sentences + 1], offsets[0] == 0

    def __len__(self) -> int:
        return len(self.offsets) - 1

    @property
    def lengths(self) -> np.ndarray:
        return np.diff(self.offsets)

    def sentence(self, i: int) -> np.ndarray:
        return self.ids[self.offsets[i] : self.offsets[i + 1]]

    def slice(self, start: int, stop: int) -> TokenBatch:
        """Rows ``start..stop-1`` (a view of the ids)."""
        low, high = self.offsets[start], self.offsets[stop]
        return TokenBatch(self.ids[low:high], self.offsets[start : stop + 1] - low)

    def take(self, rows: np.ndarray) -> TokenBatch:
        """Rows in the order given by ``rows`` (gathered without a Python loop)."""
        rows = np.asarray(rows, dtype=np.int64)
        lengths = self.lengths[rows]
        offsets = np.zeros(len(rows) + 1, dtype=np.int64)
        np.cumsum(lengths, out=offsets[1:])
        shift = np.repeat(self.offsets[rows] - offsets[:-1], lengths)
        ids = self.ids[np.arange(offsets[-1], dtype=np.int64) + shift]
        return TokenBatch(ids, offsets)

    @staticmethod
    def empty() -> TokenBatch:
        return TokenBatch(np.zeros(0, np.int64), np.zeros(1, np.int64))

    @staticmethod
    def concat(batches: Sequence[TokenBatch]) -> TokenBatch:
        """Rows of all ``batches``, one after the other."""
        if not batches:
            return TokenBatch.empty()
        if len(batches) == 1:
            return batches[0]
        ids = np.concatenate([b.ids for b in batches])
        lengths = np.concatenate([b.lengths for b in batches])
        offsets = np.zeros(len(lengths) + 1, dtype=np.int64)
        np.cumsum(lengths, out=offsets[1:])
        return TokenBatch(ids, offsets)
