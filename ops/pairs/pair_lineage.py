"""Which pairs a model's lineage trained on, which are new to it, and a replay sample of the
others: what an incremental retrain trains on.

Every pair has a 64-bit **lineage key**, a hash of its text (:func:`ops.pairs.corpus_caps.sample_keys`
with :data:`LINEAGE_SEED`: the same pair gets the same key in every file and every run). A
version keeps the sorted, distinct keys of every pair its lineage trained on (8 bytes a pair, a
``.npy`` file read memory-mapped). The pairs of a new corpus whose key is not in that array are
**new**; those whose key is in it were **seen**, and a seeded sample of them (by a second hash,
so the sample is not the file's order) is **replayed** beside the new pairs so that the model
does not forget what it learnt.

:func:`vocabulary_fit` measures whether a sentencepiece model still fits text: its pieces per
whitespace word and its share of unknown pieces, compared by the caller on the new pairs and on
the seen ones.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from itertools import islice
from pathlib import Path

import numpy as np
import pyarrow as pa

from ops.pairs.corpus_caps import sample_keys
from ops.pairs.held_back import key_threshold
from ops.pairs.pair_files import (
    PairWriter,
    iter_pair_batches,
    iter_pairs,
)
from psp_core.files.output_files import replaced_when_done

#: the seed of the lineage keys (never change it: the arrays versions keep would mean nothing)
LINEAGE_SEED = 0
#: sentences per side that :func:`split_new_and_seen` keeps for the vocabulary measure
FIT_SAMPLE = 2000


def _save_keys(keys: np.ndarray, output: str | Path) -> int:
    with replaced_when_done(output) as handle:
        np.save(handle, np.ascontiguousarray(keys, dtype=np.uint64))
    return int(len(keys))


def pair_keys(path: str | Path) -> np.ndarray:
    """The sorted, distinct lineage keys of the pairs of the pair file ``path`` (8 bytes a
    pair in memory)."""
    parts = [sample_keys(batch, LINEAGE_SEED) for batch in iter_pair_batches(path)]
    keys = np.concatenate(parts) if parts else np.empty(0, dtype=np.uint64)
    return np.unique(keys)


def write_pair_keys(path: str | Path, output: str | Path) -> int:
    """Write :func:`pair_keys` of ``path`` to the ``.npy`` file ``output``; returns the count."""
    return _save_keys(pair_keys(path), output)


def merge_keys(parent: str | Path, new_keys: np.ndarray, output: str | Path) -> int:
    """Write the union of the key array ``parent`` and ``new_keys`` (sorted, distinct) to
    ``output``; returns the count."""
    return _save_keys(np.union1d(np.load(parent, mmap_mode="r"), new_keys), output)


def is_seen(keys: np.ndarray, seen: np.ndarray) -> np.ndarray:
    """Whether each of ``keys`` is in the sorted array ``seen`` (memory-mapped is fine)."""
    if len(seen) == 0:
        return np.zeros(len(keys), dtype=bool)
    at = np.searchsorted(seen, keys)
    return seen[np.minimum(at, len(seen) - 1)] == keys


@dataclass
class LineageSplit:
    """What :func:`split_new_and_seen` found and wrote."""

    new_pairs: int = 0
    seen_pairs: int = 0
    replay_pairs: int = 0
    replay_rate: float = 0.0

    def as_dict(self) -> dict:
        return asdict(self)


def count_new_and_seen(path: str | Path, seen_keys: str | Path) -> tuple[int, int, list, list]:
    """``(new pairs, seen pairs, new sentences, seen sentences)`` of the pair file ``path``
    against the key array ``seen_keys``; the sentences (both sides) are the first
    :data:`FIT_SAMPLE` of each kind, for :func:`vocabulary_fit`."""
    seen = np.load(seen_keys, mmap_mode="r")
    n_new = n_seen = 0
    new_text: list[str] = []
    seen_text: list[str] = []
    for batch in iter_pair_batches(path, columns=["src", "tgt"]):
        known = is_seen(sample_keys(batch, LINEAGE_SEED), seen)
        n_seen += int(known.sum())
        n_new += int((~known).sum())
        for mask, text in ((~known, new_text), (known, seen_text)):
            if len(text) < 2 * FIT_SAMPLE and mask.any():
                rows = batch.filter(pa.array(mask)).slice(0, FIT_SAMPLE)
                text += rows.column("src").to_pylist() + rows.column("tgt").to_pylist()
    return n_new, n_seen, new_text, seen_text


def split_new_and_seen(
    path: str | Path,
    seen_keys: str | Path,
    output: str | Path,
    *,
    replay_pairs: int,
    n_seen: int,
    seed: int,
) -> tuple[LineageSplit, np.ndarray]:
    """Write to ``output`` every pair of ``path`` whose key is not in ``seen_keys`` and about
    ``replay_pairs`` of the ``n_seen`` others (those whose second, ``seed``-ed hash falls below
    a rate: a sample that does not depend on the file's order); returns the counts and the new
    pairs' keys (sorted)."""
    seen = np.load(seen_keys, mmap_mode="r")
    rate = min(1.0, replay_pairs / n_seen) if n_seen else 0.0
    threshold = key_threshold(rate)
    split = LineageSplit(replay_rate=rate)
    new_keys = []
    with PairWriter.like(path, output, other_columns=True) as writer:
        for batch in iter_pair_batches(path):
            keys = sample_keys(batch, LINEAGE_SEED)
            known = is_seen(keys, seen)
            replay = known & (sample_keys(batch, seed) < threshold) if rate < 1 else known
            writer.write_batch(batch.filter(pa.array(~known | replay)))
            new_keys.append(keys[~known])
            split.new_pairs += int((~known).sum())
            split.seen_pairs += int(known.sum())
            split.replay_pairs += int(replay.sum())
    keys = np.unique(np.concatenate(new_keys)) if new_keys else np.empty(0, dtype=np.uint64)
    return split, keys


@dataclass(frozen=True)
class VocabularyFit:
    """How a sentencepiece model cuts some sentences: pieces per whitespace word, and the share
    of its pieces that are the unknown piece."""

    sentences: int
    pieces_per_word: float
    unknown_share: float

    def as_dict(self) -> dict:
        return asdict(self)


def reference_sentences(paths: list, segment=None) -> list[str]:
    """Both sides of :data:`FIT_SAMPLE` pairs in all, the first of each pair file of ``paths``
    in equal parts, lowercased and pre-tokenized with ``segment`` (as the training text was):
    what a new vocabulary is measured on, to compare new text with later (held-back pairs:
    text it never saw, as new text is)."""
    per_file = max(1, FIT_SAMPLE // max(1, len(paths)))
    sentences = [
        sentence.lower()
        for path in paths
        for pair in islice(iter_pairs(path), per_file)
        for sentence in pair
    ]
    return [segment(s) for s in sentences] if segment is not None else sentences


def vocabulary_fit(model: str | Path, sentences: list[str]) -> VocabularyFit:
    """Measure the sentencepiece model file ``model`` on ``sentences`` (lowercased text, as the
    deduplicated pairs hold it)."""
    import sentencepiece as spm

    processor = spm.SentencePieceProcessor(model_file=str(model))
    unknown = processor.unk_id()
    words = pieces = unknowns = 0
    for ids in processor.encode(sentences):
        pieces += len(ids)
        unknowns += sum(1 for piece in ids if piece == unknown)
    words = sum(len(sentence.split()) for sentence in sentences)
    return VocabularyFit(
        sentences=len(sentences),
        pieces_per_word=round(pieces / words, 4) if words else 0.0,
        unknown_share=round(unknowns / pieces, 4) if pieces else 0.0,
    )
