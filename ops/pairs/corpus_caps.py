"""Per-corpus caps as the reference applies them: a seeded uniform sample of the pairs that
passed the filters, never the first lines of a file.

The reference recipe shuffles a corpus, filters it, then keeps its first N pairs (4M of
OpenSubtitles and of MultiUN in the paper). :func:`cap_corpora` does the same on a filtered
pair file whose ``corpus`` column says where each pair came from: every pair of a capped corpus
gets a seeded 64-bit key (the pair's fingerprint mixed with the seed), and the ``cap`` pairs
with the smallest keys are kept. That is a uniform random sample drawn from the whole file, of
exactly ``min(cap, passing pairs)`` pairs, in file order, and the same for the same seed.

Two streaming passes: the first finds each capped corpus's key threshold, keeping at most about
``2 * cap`` keys in memory (8 bytes each: 64 MB for a 4M cap, whatever the corpus size); the
second writes the kept pairs. The ``corpus`` column is kept. When nothing is to be dropped (no
corpus present has a cap, or none has more passing pairs than its cap: the common case) the
second pass only counts the ``corpus`` column, and the output is the input itself, hard-linked
(copied where links are not possible), instead of a rewrite of every pair.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ops.pairs.dedup import pair_fingerprints
from ops.pairs.pair_files import (
    CORPUS,
    DEFAULT_BATCH,
    PairWriter,
    has_corpus_column,
    iter_pair_batches,
    pair_file_info,
)
from ops.pairs.uint64_table import splitmix64
from ops.stage_report import StageReport

DEFAULT_SEED = 1234


class SmallestKeys:
    """The ``k`` smallest of a stream of uint64 keys, in at most ``2k`` + one batch of memory."""

    def __init__(self, k: int) -> None:
        self.k = k
        self._kept = np.empty(0, dtype=np.uint64)
        self._pending: list[np.ndarray] = []
        self._n_pending = 0
        self.n_seen = 0

    def add(self, keys: np.ndarray) -> None:
        self._pending.append(keys)
        self._n_pending += len(keys)
        self.n_seen += len(keys)
        if self._n_pending > max(self.k, 1 << 16):
            self._compact()

    def _compact(self) -> None:
        keys = np.concatenate([self._kept, *self._pending])
        if len(keys) > self.k:
            keys = np.partition(keys, self.k - 1)[: self.k] if self.k else keys[:0]
        self._kept, self._pending, self._n_pending = keys, [], 0

    def cut(self) -> tuple[int, int] | None:
        """``(threshold, n_equal)``: keep the keys below ``threshold`` and the first
        ``n_equal`` keys equal to it; None when there are at most ``k`` keys (keep them all)."""
        self._compact()
        if self.n_seen <= self.k:
            return None
        if self.k == 0:
            return 0, 0
        threshold = int(self._kept.max())
        return threshold, self.k - int((self._kept < threshold).sum())


def below_cut(
    keys: np.ndarray, cut: tuple[int, int] | None, equal_left: int
) -> tuple[np.ndarray, int]:
    """Which of ``keys`` a :meth:`SmallestKeys.cut` keeps, streaming: those below its threshold
    and, while ``equal_left`` lasts, those equal to it (ties of 64-bit keys, the first in file
    order). Returns the mask and the ties still to keep in later batches."""
    if cut is None:
        return np.ones(len(keys), dtype=bool), 0
    threshold = np.uint64(cut[0])
    chosen = keys < threshold
    ties = np.flatnonzero(keys == threshold)[:equal_left]
    chosen[ties] = True
    return chosen, equal_left - len(ties)


@dataclass
class CapReport(StageReport):
    """A :class:`StageReport` with each corpus's pairs in (``passing``), cap and kept."""

    corpora: dict[str, dict] = field(default_factory=dict)

    def as_dict(self) -> dict:
        return super().as_dict() | {"corpora": self.corpora}


def sample_keys(batch: pa.RecordBatch, seed: int) -> np.ndarray:
    """Seeded 64-bit keys of the pairs of ``batch``: the order of a sample that does not depend
    on the order of the file."""
    mixed = pair_fingerprints(batch.column("src"), batch.column("tgt")) ^ np.uint64(seed)
    return splitmix64(mixed)


def cap_corpora(
    input: str | Path,
    output: str | Path,
    caps: Mapping[str, int | None],
    *,
    seed: int = DEFAULT_SEED,
    batch_size: int = DEFAULT_BATCH,
) -> CapReport:
    """Keep at most ``caps[corpus]`` pairs of each corpus (a seeded uniform sample) and all the
    pairs of corpora without a cap, in file order and with the input's columns.

    ``input`` without a ``corpus`` column is linked or copied whole (nothing can be capped), as
    is one where no corpus has more pairs than its cap. Drop reason: ``capped``.
    ``report.corpora`` maps each corpus to ``{"passing", "cap", "kept"}``.
    """
    with_corpus = has_corpus_column(input)
    caps = {name: cap for name, cap in caps.items() if cap is not None}
    if any(cap < 0 for cap in caps.values()):
        raise ValueError(f"caps must be >= 0, got {caps}")
    samples = {name: SmallestKeys(cap) for name, cap in caps.items()}
    if with_corpus and samples:  # the first pass only finds the thresholds of capped corpora
        for batch in iter_pair_batches(input, batch_size):
            corpus = batch.column(CORPUS)
            for name in _value_counts(corpus):
                if name in samples:
                    samples[name].add(sample_keys(batch.filter(pc.equal(corpus, name)), seed))
    cuts = {name: cut for name, sample in samples.items() if (cut := sample.cut()) is not None}
    if not cuts:
        return _unchanged(input, output, caps, with_corpus, batch_size)
    equal_left = {name: cut[1] for name, cut in cuts.items()}

    report = CapReport("cap_corpora")
    passing: dict[str, int] = {}
    kept: dict[str, int] = {}
    with PairWriter.like(input, output) as writer:
        for batch in iter_pair_batches(input, batch_size):
            report.n_in += batch.num_rows
            keep = np.ones(batch.num_rows, dtype=bool)
            corpus = batch.column(CORPUS)
            for name, count in _value_counts(corpus).items():
                passing[name] = passing.get(name, 0) + count
            for name, cut in cuts.items():
                rows = np.flatnonzero(pc.equal(corpus, name).to_numpy(zero_copy_only=False))
                if not len(rows):
                    continue
                keys = sample_keys(batch.take(pa.array(rows)), seed)
                chosen, equal_left[name] = below_cut(keys, cut, equal_left[name])
                keep[rows[~chosen]] = False
            for name, count in _value_counts(corpus.filter(pa.array(keep))).items():
                kept[name] = kept.get(name, 0) + count
            writer.write_batch(batch.filter(pa.array(keep)))
            report.n_out += int(keep.sum())
            report.drop("capped", batch.num_rows - int(keep.sum()))
    report.corpora = {
        name: {"passing": passing[name], "cap": caps.get(name), "kept": kept.get(name, 0)}
        for name in passing
    }
    return report.finish()


def _unchanged(
    input: str | Path,
    output: str | Path,
    caps: Mapping[str, int],
    with_corpus: bool,
    batch_size: int,
) -> CapReport:
    """Nothing to drop: count each corpus's pairs (reading the ``corpus`` column alone) and make
    ``output`` the same file as ``input``."""
    report = CapReport("cap_corpora")
    passing: dict[str, int] = {}
    if with_corpus:
        for batch in iter_pair_batches(input, batch_size, columns=[CORPUS]):
            for name, count in _value_counts(batch.column(CORPUS)).items():
                passing[name] = passing.get(name, 0) + count
    report.n_in = report.n_out = pair_file_info(input)[0]
    report.corpora = {
        name: {"passing": count, "cap": caps.get(name), "kept": count}
        for name, count in passing.items()
    }
    output = Path(output)
    tmp = output.with_name(f".{output.name}.tmp-{os.getpid()}")
    tmp.unlink(missing_ok=True)
    try:
        os.link(input, tmp)
    except OSError:  # another filesystem, or one without hard links
        shutil.copyfile(input, tmp)
    os.replace(tmp, output)
    return report.finish()


def _value_counts(column: pa.Array) -> dict[str, int]:
    counts = pc.value_counts(column)
    return {
        value.as_py(): count.as_py()
        for value, count in zip(counts.field("values"), counts.field("counts"), strict=True)
    }
