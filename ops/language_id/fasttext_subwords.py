"""fastText's subword ids (``Dictionary::getSubwords``) for a batch of tokens, in numpy.

A token's ids are its word id when it is in the vocabulary, then one id per character n-gram of
``<token>`` (``minn..maxn`` characters, UTF-8 aware) whose FNV-1a hash modulo ``bucket``
survived the model's pruning (``pruneidx``; every hash when the model was not pruned). This is
what fastText's ``computeSubwords`` and ``pushHash`` do for one token at a time; here the n-grams
of a batch of tokens are hashed together, one n-gram length at a time.

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
        # hashed once: Arrow's index_in builds a set of the whole vocabulary again at every
        # call, a cost that grows with the vocabulary; pandas' lookup costs about the same
        # whatever its size
        import pandas as pd  # imported with language ID's model, not with the code location

        self._vocabulary = pd.Index(words, dtype=object)
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
        word_ids = self._vocabulary.get_indexer(tokens.to_numpy(zero_copy_only=False))
        in_vocabulary = word_ids >= 0
        owner, ngram_ids = self._ngram_ids(tokens)
        owner = np.concatenate([np.flatnonzero(in_vocabulary), owner])
        ids = np.concatenate([word_ids[in_vocabulary].astype(np.int64), ngram_ids])
        order = np.argsort(owner, kind="stable")
        return ids[order], np.bincount(owner, minlength=len(tokens))

    def _ngram_ids(self, tokens: pa.Array) -> tuple[np.ndarray, np.ndarray]:
        """``(token index, id)`` of every n-gram that survives pruning.

        All n-grams of one length are hashed together: ``hashes[j]`` holds the hash of the
        n-gram that starts at character ``j`` (of all tokens' characters, one after the
        other), and the n-grams one character longer fold in the bytes of character ``j + n``.
        Those are contiguous slices, so each step is one pass over the characters; only
        characters of two bytes or more take the extra passes, on their own positions.
        """
        starts, lengths, data = utf8_view(tokens)
        # "<" + token + ">" for every token, one after the other
        ends = np.cumsum(lengths + 2)
        begins = ends - lengths - 2
        text = np.empty(int(ends[-1]) if len(ends) else 0, dtype=np.uint8)
        text[begins], text[ends - 1] = _BOW, _EOW
        text[np.arange(len(data)) + np.repeat(begins + 1 - starts, lengths)] = data
        signed = text.astype(np.uint32) | np.where(text >= 0x80, np.uint32(0xFFFFFF00), 0).astype(
            np.uint32
        )
        # characters: a lead byte and the continuation bytes after it (fastText's definition)
        lead = np.flatnonzero((text & 0xC0) != 0x80)
        n_chars = len(lead)
        char_bytes = np.diff(np.append(lead, len(text)))
        # the ">" of each token is its last character
        last = np.searchsorted(lead, ends - 1)
        owner_of_char = np.repeat(np.arange(len(tokens)), np.diff(np.r_[-1, last]))
        chars_after = last[owner_of_char] - np.arange(n_chars)  # in the same token
        first_char = np.zeros(n_chars, dtype=bool)  # the "<"
        first_char[np.searchsorted(lead, begins)] = True
        byte = [signed[lead]] + [
            signed[np.minimum(lead + b, len(text) - 1)]
            for b in range(1, int(char_bytes.max(initial=1)))
        ]
        hashes = np.full(n_chars, _FNV_OFFSET, dtype=np.uint32)
        found_owner, found_row = [], []
        with np.errstate(over="ignore"):
            for n in range(1, self.maxn + 1):
                m = n_chars - n + 1  # n-grams starting at characters 0..m-1 end inside the text
                if m <= 0:
                    break
                head = hashes[:m]
                head ^= byte[0][n - 1 :]
                head *= _FNV_PRIME
                for b in range(1, len(byte)):
                    at = np.flatnonzero(char_bytes[n - 1 :] > b)
                    head[at] = (head[at] ^ byte[b][at + n - 1]) * _FNV_PRIME
                if n >= self.minn:
                    keep = chars_after[:m] >= n - 1
                    if n == 1:
                        keep &= ~first_char[:m] & (chars_after[:m] != 0)
                    row = head % np.uint32(self.bucket)
                    if self._row_of_hash is not None:  # pruned: only the n-grams with a row
                        row = self._row_of_hash[row]
                        keep &= row >= 0
                    found_owner.append(owner_of_char[:m][keep])
                    found_row.append(row[keep])
        if not found_row:
            return np.zeros(0, np.int64), np.zeros(0, np.int64)
        return np.concatenate(found_owner), self.nwords + np.concatenate(found_row).astype(np.int64)


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
