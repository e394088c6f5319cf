"""Pairs held back for development: pairs set aside before the vocabulary and the model see
them, chosen by the pair itself, sharing no sentence with what is left for training.

The dev suite (:mod:`psp_core.evaluation.dev_suite`) retrieves each held-back sentence's
translation among all held-back translations, and the promotion gate and the defaults are
decided on it, so it must be data the model never saw: a pair whose English or other side
(lowercased, as the deduplicated pairs are) equals a side of a held-back pair is dropped from
training too (``shares_a_held_back_sentence``), not only the held-back pair itself.

A pair is held back when its seeded 64-bit key (the same keys as the corpus caps,
:mod:`ops.pairs.corpus_caps`: a hash of the pair's text, whatever the file's order) falls below
``rate * 2**64``. The rate is a fixed share of the pairs (:data:`HELD_BACK_SHARE`) for a corpus
of up to ``HELD_BACK_PAIRS / HELD_BACK_SHARE`` pairs, halved each time the corpus doubles past
that, so about ``HELD_BACK_PAIRS / 2`` to ``HELD_BACK_PAIRS`` pairs are held back (a few
hundred kB of sentences in memory). So new bitext does not move a pair between training and
development: a pair held back stays held back, and a training pair never becomes a dev pair,
while the corpus grows within a doubling; when it doubles past a boundary, half the held-back
pairs (those with the larger keys) go to training and no training pair comes back. The dev
pairs of a retrain are therefore never pairs that an earlier version, trained on a part of its
corpus, trained on (a corpus that shrinks, a source removed, may raise the rate again). A sample of the k smallest keys instead would move pairs at every addition.

Two streaming passes over the input: the held-back pairs written out with their rows and
sentences collected, then the training pairs written without them (the pairs are hashed in the
first pass only).
"""

from __future__ import annotations

from contextlib import ExitStack
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ops.pairs.corpus_caps import sample_keys
from ops.pairs.pair_files import PairWriter, iter_pair_batches, pair_file_info
from ops.stage_report import StageReport

#: pairs held back per language, at most about (expected: the keys are hashes)
HELD_BACK_PAIRS = 2000
#: and this share of its pairs while that is fewer (a small corpus keeps most of its pairs for
#: training)
HELD_BACK_SHARE = 0.05
DEFAULT_SEED = 29
#: the dev suite's distractor pool: the training pairs whose key falls below this many times the
#: held-back rate (about this many times as many pairs as are held back), among which each
#: held-back sentence's translation is retrieved (benchmarks/RESULTS.md#dev-retrieval)
POOL_FACTOR = 10


def held_back_rate(
    n_pairs: int, pairs: int = HELD_BACK_PAIRS, share: float = HELD_BACK_SHARE
) -> float:
    """The share of a corpus of ``n_pairs`` pairs that is held back: ``share``, halved until it
    holds back at most ``pairs`` (so it changes only when the corpus doubles past a boundary)."""
    rate = share
    while n_pairs * rate > pairs:
        rate /= 2
    return rate


def key_threshold(rate: float) -> np.uint64:
    """The pair keys below which a pair is held back at ``rate``."""
    return np.uint64(min(int(rate * 2.0**64), 2**64 - 1))


def pool_threshold(rate: float, factor: float = POOL_FACTOR) -> np.uint64:
    """The pair keys below which a training pair is in the dev suite's pool, for a corpus held
    back at ``rate``: ``factor`` times the rate (all the pairs where that reaches 1)."""
    return key_threshold(min(1.0, rate * factor))


def hold_back(
    input: str | Path,
    train_output: str | Path,
    dev_output: str | Path,
    *,
    pool_output: str | Path | None = None,
    rate: float | None = None,
    seed: int = DEFAULT_SEED,
) -> StageReport:
    """Write the pairs of ``input`` whose key falls below ``rate`` (default
    :func:`held_back_rate` of its size) to ``dev_output`` and the others, less those sharing a
    sentence with them, to ``train_output``; with ``pool_output``, also the training pairs whose
    key falls below :data:`POOL_FACTOR` times the rate there (the dev suite's distractors).
    Reasons in the report: ``held_back``, ``shares_a_held_back_sentence``; its note
    ``dev_pool`` counts the pool's pairs (kept for training too)."""
    n_pairs = pair_file_info(input)[0]
    rate = held_back_rate(n_pairs) if rate is None else rate
    thresholds = (key_threshold(rate), pool_threshold(rate))
    report = StageReport("hold_back")
    with PairWriter.like(input, dev_output) as dev:
        held_rows, pool_rows, sentences = _write_held_back(input, dev, thresholds, seed)
    value_set = pa.array(sorted(sentences), type=pa.string())
    with ExitStack() as files:
        train = files.enter_context(PairWriter.like(input, train_output))
        pool = (
            None
            if pool_output is None
            else files.enter_context(PairWriter.like(input, pool_output))
        )
        for batch in iter_pair_batches(input):
            start, stop = report.n_in, report.n_in + batch.num_rows
            chosen, in_pool = _rows_of(held_rows, start, stop), _rows_of(pool_rows, start, stop)
            report.n_in = stop
            shares = pc.or_(
                pc.is_in(batch.column("src"), value_set=value_set),
                pc.is_in(batch.column("tgt"), value_set=value_set),
            ).to_numpy(zero_copy_only=False)
            keep = ~chosen & ~shares
            train.write_batch(batch.filter(pa.array(keep)))
            if pool is not None:
                pool.write_batch(batch.filter(pa.array(keep & in_pool)))
                report.note("dev_pool", int((keep & in_pool).sum()))
            report.n_out += int(keep.sum())
            report.drop("held_back", int(chosen.sum()))
            report.drop("shares_a_held_back_sentence", int((shares & ~chosen).sum()))
    return report.finish()


def _write_held_back(
    input: str | Path, dev: PairWriter, thresholds: tuple[np.uint64, np.uint64], seed: int
) -> tuple[np.ndarray, np.ndarray, set[str]]:
    """The first pass: write the held-back pairs (key below the first threshold) to ``dev``;
    returns their row numbers, those of the pool's candidates (key below the second) and the
    held-back sentences."""
    held_threshold, pool_threshold = thresholds
    sentences: set[str] = set()
    held_rows, pool_rows, start = [], [], 0  # row numbers in the file, in file order
    for batch in iter_pair_batches(input):
        keys = sample_keys(batch, seed)
        chosen = keys < held_threshold
        held = batch.filter(pa.array(chosen))
        dev.write_batch(held)
        sentences.update(held.column("src").to_pylist())
        sentences.update(held.column("tgt").to_pylist())
        held_rows.append(np.flatnonzero(chosen) + start)
        pool_rows.append(np.flatnonzero(~chosen & (keys < pool_threshold)) + start)
        start += batch.num_rows
    empty = np.empty(0, dtype=np.int64)
    return (
        np.concatenate(held_rows) if held_rows else empty,
        np.concatenate(pool_rows) if pool_rows else empty,
        sentences,
    )


def _rows_of(rows: np.ndarray, start: int, stop: int) -> np.ndarray:
    """A mask of the batch holding file rows ``start:stop``: those among ``rows`` (sorted)."""
    low, high = np.searchsorted(rows, [start, stop])
    mask = np.zeros(stop - start, dtype=bool)
    mask[rows[low:high] - start] = True
    return mask
