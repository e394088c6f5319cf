"""fastText's subword ids (``Dictionary::getSubwords``) for a batch of tokens, in numpy.

A token's ids are its word id when it is in the vocabulary, then one id per character n-gram of
``<token>`` (``minn..maxn`` characters, UTF-8 aware) whose FNV-1a hash modulo ``bucket``
survived the model's pruning (``pruneidx``; every hash when the model was not pruned). This is
what fastText's ``computeSubwords`` and ``pushHash`` do for one token at a time; here all the
n-grams of a batch of tokens are hashed at once, byte position by byte position.

The pruning map is not exposed by the Python binding, so :func:`read_pruning` reads it from the
model file (fastText's binary format, version 12: header, arguments, dictionary entries, then
the ``pruneidx`` pairs). When the file is not in that format, :func:`subword_index` returns None
and the caller asks fastText one token at a time.
"""

from __future__ import annotations

import logging
import struct
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

log = logging.getLogger(__name__)

_MAGIC, _VERSION = 793712314, 12
_FNV_OFFSET, _FNV_PRIME = np.uint32(2166136261), np.uint32(16777619)
_BOW, _EOW = ord("<"), ord(">")


def read_pruning(path: str | Path) -> tuple[int, np.ndarray, np.ndarray] | None:
    """The model's ``pruneidx``: ``(size, hashes, rows)``, n-gram hash -> row after the words.

    ``size`` is -1 for a model that keeps every bucket (no map) and 0 for one pruned down to no
    n-grams at all. None when the file is not fastText's binary format 12.
    """
    with open(path, "rb") as handle:
        head = handle.read(92)
        if len(head) < 92 or struct.unpack("<ii", head[:8]) != (_MAGIC, _VERSION):
            return None
        size, _, _, _, prune_size = struct.unpack("<iiiqq", head[64:92])
        for _ in range(size):  # entries: word bytes, NUL, int64 count, int8 type
            while handle.read(1) not in (b"\0", b""):
                pass
            handle.read(9)
        if prune_size <= 0:
            return prune_size, np.zeros(0, np.int64), np.zeros(0, np.int64)
        pairs = np.frombuffer(handle.read(8 * prune_size), dtype="<i4")
        if len(pairs) != 2 * prune_size:
            return None
        return prune_size, pairs[0::2].astype(np.int64), pairs[1::2].astype(np.int64)


def utf8_view(strings: pa.Array) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(starts, lengths, data)`` of an Arrow string array, without copying its bytes: string
    ``i`` is ``data[starts[i] : starts[i] + lengths[i]]`` (UTF-8), whatever the array's offset."""
    offsets = np.frombuffer(strings.buffers()[1], dtype=np.int32)[
        strings.offset : strings.offset + len(strings) + 1
    ].astype(np.int64)
    data = np.frombuffer(strings.buffers()[2] or b"", dtype=np.uint8)[offsets[0] : offsets[-1]]
    return offsets[:-1] - offsets[0], np.diff(offsets), data


class SubwordIndex:
    """Vectorized ``getSubwords``: see the module docstring.

    Args:
        words: the vocabulary in id order (``model.get_words()``).
        minn, maxn, bucket: the model's character n-gram settings.
        pruning: :func:`read_pruning`'s ``(size, hashes, rows)``.
    """

    def __init__(
        self,
        words: list[str],
        *,
        minn: int,
        maxn: int,
        bucket: int,
        pruning: tuple[int, np.ndarray, np.ndarray],
    ) -> None:
        self.words = pa.array(words, pa.string())
        self.nwords = len(words)
        self.minn, self.maxn, self.bucket = minn, maxn, bucket
        size, hashes, rows = pruning
        self._row_of_hash: np.ndarray | None = None  # None: every bucket is a row
        if size >= 0:
            self._row_of_hash = np.full(bucket, -1, dtype=np.int32)
            self._row_of_hash[hashes] = rows

    def ids(self, tokens: pa.Array) -> tuple[np.ndarray, np.ndarray]:
        """The ids of every token, as ``(flat ids, per-token counts)`` (each token's ids
        together, in token order; within a token in no particular order)."""
        found = pc.index_in(tokens, value_set=self.words)
        word_ids = pc.fill_null(found, -1).to_numpy(zero_copy_only=False)
        in_vocabulary = word_ids >= 0
        owner, ngram_ids = self._ngram_ids(tokens)
        owner = np.concatenate([np.flatnonzero(in_vocabulary), owner])
        ids = np.concatenate([word_ids[in_vocabulary].astype(np.int64), ngram_ids])
        order = np.argsort(owner, kind="stable")
        return ids[order], np.bincount(owner, minlength=len(tokens))

    def _ngram_ids(self, tokens: pa.Array) -> tuple[np.ndarray, np.ndarray]:
        """``(token index, id)`` of every n-gram that survives pruning."""
        starts, lengths, data = utf8_view(tokens)
        # "<" + token + ">" for every token, one after the other
        ends = np.cumsum(lengths + 2)
        begins = ends - lengths - 2
        text = np.empty(int(ends[-1]) if len(ends) else 0, dtype=np.uint8)
        text[begins], text[ends - 1] = _BOW, _EOW
        text[np.arange(len(data)) + np.repeat(begins + 1 - starts, lengths)] = data
        token_of = np.repeat(np.arange(len(tokens)), lengths + 2)
        continuation = (text & 0xC0) == 0x80
        signed = text.astype(np.uint32) | np.where(text >= 0x80, np.uint32(0xFFFFFF00), 0).astype(
            np.uint32
        )

        start = np.flatnonzero(~continuation)  # an n-gram starts at every character
        owner, first, end = token_of[start], begins[token_of[start]], ends[token_of[start]]
        position = start.copy()
        hashes = np.full(len(start), _FNV_OFFSET, dtype=np.uint32)
        alive = np.arange(len(start))
        found_owner, found_hash = [], []
        with np.errstate(over="ignore"):
            for n in range(1, self.maxn + 1):
                alive = alive[position[alive] < end[alive]]
                # one character: its first byte, then its continuation bytes
                at = position[alive]
                hashes[alive] = (hashes[alive] ^ signed[at]) * _FNV_PRIME
                position[alive] += 1
                more = alive
                for _ in range(3):
                    more = more[position[more] < end[more]]
                    more = more[continuation[position[more]]]
                    if not len(more):
                        break
                    hashes[more] = (hashes[more] ^ signed[position[more]]) * _FNV_PRIME
                    position[more] += 1
                if n >= self.minn:
                    keep = alive
                    if n == 1:
                        keep = keep[(start[keep] != first[keep]) & (position[keep] != end[keep])]
                    found_owner.append(owner[keep])
                    found_hash.append(hashes[keep] % np.uint32(self.bucket))
        owner = np.concatenate(found_owner) if found_owner else np.zeros(0, np.int64)
        hashed = np.concatenate(found_hash).astype(np.int64) if found_hash else owner
        if self._row_of_hash is not None:
            rows = self._row_of_hash[hashed]
            owner, hashed = owner[rows >= 0], rows[rows >= 0]
        return owner, self.nwords + hashed


def subword_index(model, path: str | Path) -> SubwordIndex | None:
    """The :class:`SubwordIndex` of the loaded ``model`` read from ``path``, or None when the
    file's pruning map cannot be read (fastText is then asked token by token)."""
    try:
        pruning = read_pruning(path)
    except OSError as error:
        log.debug("cannot read %s (%s): subwords come from fastText", path, error)
        return None
    if pruning is None:
        return None
    args = model.f.getArgs()
    return SubwordIndex(
        model.get_words(), minn=args.minn, maxn=args.maxn, bucket=args.bucket, pruning=pruning
    )
