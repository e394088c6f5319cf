"""The dev suite's retrieval: each held-back sentence's translation retrieved among the
held-back translations and a pool of distractors, as an error rate the gate reads as
lower-is-better."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from psp_core.evaluation.dev_suite import DevSuite, retrieval_error
from psp_core.evaluation.gate import decide


def unit_rows(rows: np.ndarray) -> np.ndarray:
    return rows / np.linalg.norm(rows, axis=1, keepdims=True)


def test_a_distractor_nearer_than_the_translation_is_an_error():
    rng = np.random.default_rng(0)
    queries = unit_rows(rng.normal(size=(50, 32)))
    translations = unit_rows(queries + 0.02 * rng.normal(size=queries.shape))
    far = unit_rows(rng.normal(size=(500, 32)))
    assert retrieval_error(queries, translations) == 0.0
    assert retrieval_error(queries, translations, far) == 0.0
    # nearer copies of the first ten queries among the distractors: those ten go wrong
    near = unit_rows(queries[:10] + 0.001 * rng.normal(size=(10, 32)))
    assert retrieval_error(queries, translations, np.concatenate([far, near])) == 20.0


def write_pairs(path, english: list[str], other: list[str]):
    pq.write_table(pa.table({"src": english, "tgt": other}), path)
    return path


def test_the_pool_takes_part_in_both_directions(tmp_path, model, toy):
    """Held-back "translations" that repeat their sentence with a word more, and a pool whose
    pairs are the held-back pairs the other way round: each query finds its own text among the
    distractors, nearer than its translation, in both directions; without the pool it finds
    its translation."""
    english = [a for a, _ in toy.pairs(40, seed=5)]
    other = [f"{sentence} {sentence.split()[-1]}" for sentence in english]
    held = write_pairs(tmp_path / "held.parquet", english, other)
    pool = write_pairs(tmp_path / "pool.parquet", other, english)
    alone = DevSuite(tmp_path / "no-eval", {"xx": held}).scores(model)
    pooled = DevSuite(tmp_path / "no-eval", {"xx": held}, {"xx": pool}).scores(model)
    assert set(alone) == set(pooled) == {"held_back_xx_error"}
    assert alone["held_back_xx_error"] < 10.0 and pooled["held_back_xx_error"] == 100.0


def test_the_gate_reads_an_error_as_lower_is_better():
    incumbent = {"sts17_en_en": 80.0, "held_back_de_error": 5.0}
    worse = decide({"sts17_en_en": 80.0, "held_back_de_error": 6.5}, incumbent, 1.0)
    assert not worse.promote and worse.worse == ["held_back_de_error"]
    within = decide({"sts17_en_en": 79.5, "held_back_de_error": 5.9}, incumbent, 1.0)
    better = decide({"sts17_en_en": 80.0, "held_back_de_error": 2.0}, incumbent, 1.0)
    assert within.promote and better.promote
