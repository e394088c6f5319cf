"""The word cache steps aside when it does not pay for itself (psp_core/cache_policy.py): one pass
over distinct sentences of new words only probes it, with the same vectors; a workload that
repeats its sentences takes it."""

from __future__ import annotations

import random

import numpy as np

from psp_core import load_model
from psp_core.cache_policy import (
    HOLD_BLOCKS,
    HOLD_FLOOR,
    PROBE_SENTENCES,
    RETURN,
    STAY,
    CachePolicy,
)


def _new_words_stream(count: int, seed: int = 0) -> list[str]:
    """Sentences of 8 made-up words each, nearly every word new (a corpus' long tail)."""
    rng = random.Random(seed)
    return [
        " ".join(
            "".join(rng.choice("abcdefghij") for _ in range(rng.randint(6, 11))) for _ in "x" * 8
        )
        for _ in range(count)
    ]


def test_a_pass_over_new_words_leaves_the_cache_with_the_same_vectors(bundle) -> None:
    sentences = _new_words_stream(30_000)
    cached, plain = load_model(bundle), load_model(bundle, word_cache_size=0)
    got = cached.embed(sentences)
    policy = cached.tokenizer.cache_policy
    assert not policy.use_cache
    # only probes of each block went through the cache
    assert policy.given == 4 * PROBE_SENTENCES, policy.given
    np.testing.assert_allclose(got, plain.embed(sentences), rtol=1e-5, atol=1e-6)


def test_repeated_sentences_take_the_cache_back(bundle) -> None:
    sentences = _new_words_stream(20_000, seed=1)
    model = load_model(bundle)
    model.embed(sentences)
    assert not model.tokenizer.cache_policy.use_cache
    # the probes learn the words of the sentences that come back (here nearly every word is new,
    # 8 a sentence: the first held blocks serve under HOLD_FLOOR and leave, so it takes five
    # passes where it took three before HOLD_FLOOR)
    for _ in range(5):
        again = model.embed(sentences)
    policy = model.tokenizer.cache_policy
    assert policy.use_cache
    served_before = policy.served
    np.testing.assert_allclose(again, model.embed(sentences), rtol=1e-5, atol=1e-6)
    assert policy.served - served_before >= 0.95 * len(sentences)


def test_the_policy_probes_first_returns_from_return_holds_and_leaves_below_stay() -> None:
    policy = CachePolicy()
    probe = policy.probe_rows(10_000)  # a new model probes
    assert len(probe) == PROBE_SENTENCES and probe[0] == 0 and probe[-1] == 9_999
    assert policy.probe_rows(PROBE_SENTENCES) is None  # a small block goes through whole
    policy.probed(int(RETURN * 100) - 1, 100)
    assert not policy.use_cache
    policy.probed(int(RETURN * 100), 100)
    assert policy.use_cache and policy.probe_rows(10_000) is None
    for _ in range(HOLD_BLOCKS):  # kept while it learns the rest of the workload's words
        policy.block_served(int(HOLD_FLOOR * 100), 100)
        assert policy.use_cache
    policy.block_served(int(STAY * 100), 100)
    assert policy.use_cache
    policy.block_served(int(STAY * 100) - 1, 100)
    assert not policy.use_cache


def test_a_held_block_serving_little_leaves_and_the_probe_moves() -> None:
    """A workload that comes back without its words (a second pass over a large corpus: its
    probe falls on sentences probed before) leaves after one poor block, and the next probes
    look at other sentences."""
    policy = CachePolicy()
    first_probe = policy.probe_rows(10_000)
    policy.probed(100, 100)
    assert policy.use_cache and policy.hold == HOLD_BLOCKS
    policy.block_served(int(HOLD_FLOOR * 100) - 1, 100)
    assert not policy.use_cache and policy.hold == 0
    moved = policy.probe_rows(10_000)
    assert len(moved) == PROBE_SENTENCES and moved[-1] <= 9_999
    assert not set(moved.tolist()) & set(first_probe.tolist())
