"""Open-addressing hash tables of uint64 keys in numpy arrays, filled a batch at a time.

Two users: :class:`ops.pairs.dedup.FingerprintSet` (a set of 64-bit pair fingerprints, a few bytes per
pair) and :class:`KeyIndex` (64-bit token hashes -> consecutive ids, the token cache of
:mod:`ops.language_id.fasttext_batch`). Both keep their keys in one ``uint64`` array, with 0 marking an
empty slot (a key 0 is stored as 1), linear probing, at most 70% full.
"""

from __future__ import annotations

import numpy as np

MAX_LOAD = 0.7
EMPTY = np.uint64(0)


def splitmix64(values: np.ndarray) -> np.ndarray:
    """The splitmix64 finalizer, elementwise: a bijection of uint64 that mixes every bit."""
    with np.errstate(over="ignore"):
        z = values + np.uint64(0x9E3779B97F4A7C15)
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        return z ^ (z >> np.uint64(31))


def nonzero_keys(keys: np.ndarray) -> np.ndarray:
    """``keys`` as uint64 with 0 (the empty-slot marker) replaced by 1."""
    keys = np.asarray(keys, dtype=np.uint64)
    return np.where(keys == EMPTY, np.uint64(1), keys)


def home_slots(keys: np.ndarray, capacity: int) -> np.ndarray:
    """Multiply-shift range reduction: the high 32 bits of each key scaled to ``capacity``."""
    return ((keys >> np.uint64(32)) * np.uint64(capacity)) >> np.uint64(32)


def insert_distinct(table: np.ndarray, keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Insert distinct nonzero ``keys`` into ``table`` (which must have room for all of them).

    Returns each key's slot and whether it was absent before. Linear probing, vectorized:
    every round, each pending key looks at its slot, and keys that find an empty slot claim it
    (one of several keys racing for a slot wins; the rest probe on).
    """
    capacity = np.uint64(len(table))
    inserted = np.zeros(len(keys), dtype=bool)
    found = np.zeros(len(keys), dtype=np.uint64)
    pending = np.arange(len(keys))
    slots = home_slots(keys, len(table))
    while len(pending):
        occupant = table[slots]
        empty = occupant == EMPTY
        table[slots[empty]] = keys[pending[empty]]
        won = empty & (table[slots] == keys[pending])
        inserted[pending[won]] = True
        done = won | (occupant == keys[pending])
        found[pending[done]] = slots[done]
        pending, slots = pending[~done], slots[~done] + np.uint64(1)
        slots[slots == capacity] = 0
    return found.astype(np.int64), inserted


class KeyIndex:
    """uint64 keys -> ids 0, 1, 2... in the order the keys were first seen.

    Memory: 12 bytes per slot (the key and its id), about 17-24 bytes per key.
    """

    def __init__(self, capacity: int = 1 << 16) -> None:
        self._keys = np.zeros(max(int(capacity), 8), dtype=np.uint64)
        self._ids = np.zeros(len(self._keys), dtype=np.int64)
        self.size = 0

    def __len__(self) -> int:
        return self.size

    @property
    def nbytes(self) -> int:
        return self._keys.nbytes + self._ids.nbytes

    def clear(self) -> None:
        self._keys[:] = EMPTY
        self.size = 0

    def ids(self, keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The id of each of the distinct ``keys``, adding the unseen ones (next ids, in
        input order); and which keys were new."""
        keys = nonzero_keys(keys)
        while self.size + len(keys) > MAX_LOAD * len(self._keys):
            self._grow()
        slots, new = insert_distinct(self._keys, keys)
        self._ids[slots[new]] = self.size + np.arange(int(new.sum()))
        self.size += int(new.sum())
        return self._ids[slots], new

    def _grow(self) -> None:
        occupied = self._keys != EMPTY
        keys, ids = self._keys[occupied], self._ids[occupied]
        self._keys = np.zeros(2 * len(self._keys), dtype=np.uint64)
        self._ids = np.zeros(len(self._keys), dtype=np.int64)
        slots, _ = insert_distinct(self._keys, keys)
        self._ids[slots] = ids
