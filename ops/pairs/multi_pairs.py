"""The multilingual model's training pairs: the union of several languages' deduplicated pair
files, each language drawn by temperature sampling, written as one pair file with a ``lang``
column (each pair's language: its negative-mining group) and the multilingual pre-tokenizer
applied to every sentence.

Temperature sampling (Conneau & Lample 2019, "Cross-lingual language model pretraining") gives
language ``l`` with ``n_l`` pairs the probability ``p_l = n_l ** alpha / sum_k n_k ** alpha``;
the output keeps the union's size ``N = sum_k n_k`` and takes ``round(N * p_l)`` pairs of
``l``: ``alpha = 1`` is the plain union, smaller values repeat small languages' pairs and
subsample large ones. A language is written as whole copies of its file plus a seeded uniform
sample of its pairs without repetition for the rest, so the sample is exact and streaming:
one pass per language over its file, in record batches, with a mask of one byte per pair.
The sentencepiece sample and the training pairs both come from this file, so both are
balanced the same way.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa

from ops.pairs.pair_files import PairWriter, iter_pair_batches, pair_file_info
from ops.progress import Progress

log = logging.getLogger(__name__)

LANG = "lang"


@dataclass(frozen=True)
class LanguagePairs:
    """One language's deduplicated pair file and what kind of pairs it holds."""

    code: str
    kind: str  # "bitext" (en-X) or "paraphrase" (en-en)
    path: Path

    @property
    def n_pairs(self) -> int:
        return pair_file_info(self.path)[0]


def temperature_counts(counts: dict[str, int], alpha: float) -> dict[str, int]:
    """Pairs to take of each language: ``round(N * n_l**alpha / sum n_k**alpha)`` with ``N``
    the total, the rounding remainder given to the largest languages so the total is ``N``.
    A language with no pairs gets none."""
    total = sum(counts.values())
    weights = {code: float(n) ** alpha if n > 0 else 0.0 for code, n in counts.items()}
    norm = sum(weights.values())
    if total == 0 or norm == 0:
        return {code: 0 for code in counts}
    exact = {code: total * w / norm for code, w in weights.items()}
    taken = {code: int(np.floor(value)) for code, value in exact.items()}
    by_remainder = sorted(exact, key=lambda code: (taken[code] - exact[code], -counts[code]))
    for code in by_remainder[: total - sum(taken.values())]:
        taken[code] += 1
    return taken


def _sample_mask(n: int, k: int, rng: np.random.Generator) -> np.ndarray:
    """A boolean mask of ``n`` with exactly ``k`` seeded, uniformly chosen rows set."""
    mask = np.zeros(n, dtype=bool)
    if k:
        mask[rng.choice(n, size=k, replace=False)] = True
    return mask


def sample_languages(
    languages: Sequence[LanguagePairs],
    output: str | Path,
    *,
    alpha: float,
    seed: int,
    pretokenize: Callable[[str], str] | None = None,
    batch_size: int = 65_536,
) -> dict:
    """Write the temperature-sampled union of ``languages`` to the pair file ``output``
    (columns ``src``, ``tgt``, ``lang``; atomic). The order is language by language: the
    training data's shuffle mixes them. ``pretokenize`` is applied to every sentence.

    Returns the record: pairs in and out, and per language its kind, pairs in, pairs out,
    share, whole copies and the sampled remainder.
    """
    started_all = time.perf_counter()
    n_in = 0
    counts = {lang.code: lang.n_pairs for lang in languages}
    targets = temperature_counts(counts, alpha)
    rng = np.random.default_rng(seed)
    progress = Progress("multilingual pairs", sum(targets.values()))
    per_language = {}
    with PairWriter(
        output,
        src_lang="en",
        tgt_lang="mul",
        background=True,
        extra_fields=[pa.field(LANG, pa.string())],
    ) as writer:
        schema = writer.schema
        for lang in languages:
            started = time.perf_counter()
            n, target = counts[lang.code], targets[lang.code]
            copies, rest = divmod(target, n) if n else (0, 0)
            mask = _sample_mask(n, rest, rng)
            row = 0
            for batch in iter_pair_batches(lang.path, batch_size, columns=["src", "tgt"]):
                src, tgt = batch.column("src"), batch.column("tgt")
                if pretokenize is not None:
                    src = pa.array([pretokenize(text) for text in src.to_pylist()], pa.string())
                    tgt = pa.array([pretokenize(text) for text in tgt.to_pylist()], pa.string())
                tag = pa.repeat(pa.scalar(lang.code, pa.string()), batch.num_rows)
                rows = pa.RecordBatch.from_arrays([src, tgt, tag], schema=schema)
                for _ in range(copies):
                    writer.write_batch(rows)
                chosen = rows.filter(pa.array(mask[row : row + batch.num_rows]))
                writer.write_batch(chosen)
                row += batch.num_rows
                n_in += batch.num_rows
                progress.update(copies * batch.num_rows + chosen.num_rows)
            if row != n:
                raise ValueError(f"{lang.path}: footer says {n} pairs but {row} were read")
            per_language[lang.code] = {
                "kind": lang.kind,
                "pairs_in": n,
                "pairs_out": target,
                "share": round(target / max(sum(targets.values()), 1), 6),
                "copies": copies,
                "sampled": rest,
                "seconds": round(time.perf_counter() - started, 3),
            }
            log.info(
                "multi: %s %d pairs in, %d out (%d whole copies + %d sampled)",
                lang.code,
                n,
                target,
                copies,
                rest,
            )
        n_out = writer.n_pairs
    return {
        "n_in": n_in,
        "n_out": n_out,
        "alpha": alpha,
        "seed": seed,
        "languages": per_language,
        "seconds": round(time.perf_counter() - started_all, 3),
    }
