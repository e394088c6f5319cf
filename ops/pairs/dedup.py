"""Lowercasing and exact-pair deduplication, keeping the first copy, in a few bytes per pair.

Each lowercased pair becomes one 64-bit fingerprint: pandas' vectorized SipHash-2-4 of each
side's UTF-8 bytes, mixed as ``mix(h(src) ^ mix(h(tgt)))`` with the bijective splitmix64
finalizer (so the order of the sides matters and no separator character is needed).
Fingerprints live in :class:`FingerprintSet`, an open-addressing numpy table of uint64
(linear probing, at most 70% full, grown by doubling): 8 bytes per slot, about 11-16 bytes per
distinct pair, instead of ~70 bytes per entry for a Python ``set`` of ints.

**Collisions**: two different pairs get the same fingerprint with probability 2^-64, so among
``n`` distinct pairs the chance that any two collide (and one is wrongly dropped as a
duplicate) is at most n(n-1)/2 * 2^-64: about 7e-5 for 50 million pairs, 3% for a billion.
"""

from __future__ import annotations

import functools
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ops.pairs.pair_files import (
    CORPUS,
    DEFAULT_BATCH,
    PairWriter,
    has_corpus_column,
    iter_pair_batches,
    pair_file_info,
)
from ops.pairs.uint64_table import EMPTY, MAX_LOAD, insert_distinct, nonzero_keys, splitmix64
from ops.progress import Progress
from ops.stage_report import StageReport


@functools.cache
def _lowercase_mismatch_pattern() -> str:
    """RE2 class of the characters whose Arrow lowercase differs from Python's ``str.lower``.

    Arrow (utf8proc) uses simple case mapping and a newer Unicode version; Python maps e.g.
    ``İ`` to ``i̇`` and a word-final ``Σ`` to ``ς``. Computed once per process: see
    :func:`_lowercase_mismatches`.
    """
    differing = _lowercase_mismatches()
    differing.add(0x03A3)  # Σ: Python lowercases it by context (final sigma)
    return "[" + "".join(f"\\x{{{code:x}}}" for code in sorted(differing)) + "]"


def _lowercase_mismatches(block: int = 4096) -> set[int]:
    """Code points ``c`` with ``pc.utf8_lower(chr(c)) != chr(c).lower()``, every surrogate
    excepted.

    Both lowercasings run on blocks of ``block`` characters at once and are compared as code
    point arrays. Arrow maps each code point to one code point; Python's ``lower`` does too,
    except for a few characters (``İ``) that become two: a block whose length changes is
    compared one character at a time. Inside a block Python's final-sigma rule may lowercase
    ``Σ`` by its neighbours, which is why the caller adds ``Σ`` whatever this finds.
    """
    codes = np.r_[np.arange(0xD800), np.arange(0xE000, 0x110000)].astype("<u4")
    blocks = [codes[i : i + block] for i in range(0, len(codes), block)]
    texts = [block_codes.tobytes().decode("utf-32-le") for block_codes in blocks]
    arrow_lowered = pc.utf8_lower(pa.array(texts)).to_pylist()
    differing: set[int] = set()
    for block_codes, text, arrow in zip(blocks, texts, arrow_lowered, strict=True):
        python = text.lower()
        if len(python) == len(text) == len(arrow):
            python_codes = np.frombuffer(python.encode("utf-32-le"), "<u4")
            arrow_codes = np.frombuffer(arrow.encode("utf-32-le"), "<u4")
            differing.update(block_codes[python_codes != arrow_codes].tolist())
        else:
            lowered = pc.utf8_lower(pa.array(list(text))).to_pylist()
            differing.update(
                ord(c) for c, low in zip(text, lowered, strict=True) if c.lower() != low
            )
    return differing


def lowercase(texts: pa.Array) -> pa.Array:
    """Lowercase exactly like Python's ``str.lower`` (what the model's tokenizer applies).

    Arrow's ``utf8_lower`` does the work; the rare strings holding a character on which the
    two disagree are redone with ``str.lower``.
    """
    lowered = pc.utf8_lower(texts)
    special = pc.match_substring_regex(texts, _lowercase_mismatch_pattern())
    if pc.any(special).as_py():
        redo = pc.filter(texts, special).to_pylist()
        lowered = pc.replace_with_mask(lowered, special, pa.array([t.lower() for t in redo]))
    return lowered


def pair_fingerprints(src: pa.Array, tgt: pa.Array) -> np.ndarray:
    """64-bit fingerprint of each ``(src, tgt)`` pair (exact text; lowercase first)."""
    import pandas as pd  # imported by the step that hashes, not with the code location

    def side(texts: pa.Array) -> np.ndarray:
        objects = texts.to_numpy(zero_copy_only=False)
        return pd.util.hash_array(objects, categorize=False).astype(np.uint64, copy=False)

    return splitmix64(side(src) ^ splitmix64(side(tgt)))


class FingerprintSet:
    """A growing set of uint64 fingerprints in one numpy array (open addressing).

    Zero marks an empty slot, so the fingerprint 0 is stored as 1 (one more collision pair
    in 2^64). :meth:`add` inserts a batch vectorized and says which entries were new.
    """

    def __init__(self, capacity: int = 1 << 16) -> None:
        self._table = np.zeros(max(int(capacity), 8), dtype=np.uint64)
        self.size = 0

    @property
    def nbytes(self) -> int:
        return self._table.nbytes

    def __len__(self) -> int:
        return self.size

    def add(self, keys: np.ndarray) -> np.ndarray:
        """Insert ``keys``; True where a key was not in the set before (the first in-batch
        copy of a repeated key counts as new, later copies do not)."""
        distinct, first = np.unique(nonzero_keys(keys), return_index=True)
        while (self.size + len(distinct)) > MAX_LOAD * len(self._table):
            self._grow()
        _, inserted = insert_distinct(self._table, distinct)
        self.size += int(inserted.sum())
        is_new = np.zeros(len(keys), dtype=bool)
        is_new[first[inserted]] = True
        return is_new

    def _grow(self) -> None:
        old = self._table[self._table != EMPTY]
        self._table = np.zeros(2 * len(self._table), dtype=np.uint64)
        insert_distinct(self._table, old)


def deduplicate(
    input: str | Path, output: str | Path, *, batch_size: int = DEFAULT_BATCH
) -> StageReport:
    """Lowercase both sides and drop exact repeats of a (lowercased) pair, keeping the first.

    The output text is lowercased (the paper lowercases everything); ``score`` and ``corpus``
    columns are passed through with their pair's first copy. Drop reason: ``duplicate``.
    """
    n_pairs, src_lang, tgt_lang, has_score = pair_file_info(input)
    progress = Progress("dedup", n_pairs)
    with_corpus = has_corpus_column(input)
    seen = FingerprintSet(capacity=n_pairs / MAX_LOAD + 8)
    report = StageReport("deduplicate")
    with PairWriter.like(input, output) as writer:
        for batch in iter_pair_batches(input, batch_size):
            report.n_in += batch.num_rows
            progress.update(batch.num_rows)
            src, tgt = lowercase(batch.column("src")), lowercase(batch.column("tgt"))
            is_new = seen.add(pair_fingerprints(src, tgt))
            columns = [src, tgt] + ([batch.column("score")] if has_score else [])
            columns += [batch.column(CORPUS)] if with_corpus else []
            lowered = pa.RecordBatch.from_arrays(columns, schema=writer.schema)
            writer.write_batch(lowered.filter(pa.array(is_new)))
            report.n_out += int(is_new.sum())
            report.drop("duplicate", batch.num_rows - int(is_new.sum()))
    return report.finish()
