"""Pairs held back for development: a seeded sample of a language's pairs set aside before the
vocabulary and the model see them, sharing no sentence with what is left for training.

The dev suite (:mod:`psp_core.evaluation.dev_suite`) retrieves each held-back sentence's
translation among all held-back translations, and the promotion gate and the defaults are
decided on it, so it must be data the model never saw: a pair whose English or other side
(lowercased, as the deduplicated pairs are) equals a side of a held-back pair is dropped from
training too (``shares_a_held_back_sentence``), not only the held-back pair itself.

Three streaming passes over the input: the ``k`` smallest seeded pair keys (the same keys as the
corpus caps, :mod:`ops.corpus_caps`: a sample independent of the file's order), the held-back pairs
written out with their rows and sentences collected (``k`` at most 2,000: a few hundred kB),
then the training pairs written without them (the pairs are hashed in the first two passes
only).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ops.corpus_caps import SmallestKeys, below_cut, sample_keys
from ops.pair_files import PairWriter, iter_pair_batches, pair_file_info
from ops.stage_report import StageReport

#: pairs held back per language, at most
HELD_BACK_PAIRS = 2000
#: and at most this share of its pairs (a small corpus keeps most of its pairs for training)
HELD_BACK_SHARE = 0.05
DEFAULT_SEED = 29


def held_back_count(n_pairs: int, pairs: int = HELD_BACK_PAIRS, share: float = HELD_BACK_SHARE):
    return min(pairs, int(n_pairs * share))


def hold_back(
    input: str | Path,
    train_output: str | Path,
    dev_output: str | Path,
    *,
    count: int | None = None,
    seed: int = DEFAULT_SEED,
) -> StageReport:
    """Write ``count`` (default :func:`held_back_count`) sampled pairs of ``input`` to
    ``dev_output`` and the others, less those sharing a sentence with them, to
    ``train_output``. Reasons in the report: ``held_back``, ``shares_a_held_back_sentence``."""
    n_pairs = pair_file_info(input)[0]
    k = held_back_count(n_pairs) if count is None else count
    smallest = SmallestKeys(k)
    for batch in iter_pair_batches(input):
        smallest.add(sample_keys(batch, seed))
    cut = smallest.cut()
    report = StageReport("hold_back")
    sentences: set[str] = set()
    held_rows = []  # row numbers in the file of the held-back pairs
    with PairWriter.like(input, dev_output) as dev:
        equal_left = cut[1] if cut else 0
        start = 0
        for batch in iter_pair_batches(input):
            chosen, equal_left = below_cut(sample_keys(batch, seed), cut, equal_left)
            held = batch.filter(pa.array(chosen))
            dev.write_batch(held)
            sentences.update(held.column("src").to_pylist())
            sentences.update(held.column("tgt").to_pylist())
            held_rows.append(np.flatnonzero(chosen) + start)
            start += batch.num_rows
    held_rows = np.concatenate(held_rows) if held_rows else np.empty(0, dtype=np.int64)
    value_set = pa.array(sorted(sentences), type=pa.string())
    with PairWriter.like(input, train_output) as train:
        for batch in iter_pair_batches(input):
            start, stop = report.n_in, report.n_in + batch.num_rows
            low, high = np.searchsorted(held_rows, [start, stop])  # (sorted: file order)
            chosen = np.zeros(batch.num_rows, dtype=bool)
            chosen[held_rows[low:high] - start] = True
            report.n_in = stop
            shares = pc.or_(
                pc.is_in(batch.column("src"), value_set=value_set),
                pc.is_in(batch.column("tgt"), value_set=value_set),
            ).to_numpy(zero_copy_only=False)
            keep = ~chosen & ~shares
            train.write_batch(batch.filter(pa.array(keep)))
            report.n_out += int(keep.sum())
            report.drop("held_back", int(chosen.sum()))
            report.drop("shares_a_held_back_sentence", int((shares & ~chosen).sum()))
    return report.finish()
