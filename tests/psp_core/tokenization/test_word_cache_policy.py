"""The word cache steps aside when it does not pay for itself (psp_core/tokenization/word_cache_policy.py): one pass
over distinct sentences of new words only probes it, with the same vectors; a workload that
repeats its sentences takes it."""

from __future__ import annotations

import random

import numpy as np
import pytest

from psp_core import load_model
from psp_core.tokenization.word_cache_policy import (
    HOLD_BLOCKS,
    HOLD_FLOOR,
    PROBE_SENTENCES,
    RETURN,
    STAY,
    TRIAL_SENTENCES,
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


def _zipf_stream(count: int, seed: int = 0, vocabulary: int = 5_000) -> list[str]:
    """Sentences of 8 words drawn from a Zipfian vocabulary (as natural text: a few words
    frequent, most rare)."""
    rng = random.Random(seed)
    words = [
        "".join(rng.choice("abcdefghij") for _ in range(rng.randint(3, 9)))
        for _ in range(vocabulary)
    ]
    weights = [1 / (rank + 1) for rank in range(vocabulary)]
    return [" ".join(rng.choices(words, weights, k=8)) for _ in range(count)]


@pytest.mark.slow
def test_repeated_sentences_take_the_cache_back(bundle) -> None:
    sentences = _zipf_stream(20_000, seed=1)
    model = load_model(bundle)
    model.embed(sentences)
    assert not model.tokenizer.cache_policy.use_cache
    # the second pass: a probe falls on sentences probed before, the trial serves enough and
    # the cache takes whole blocks, learning the rest of the words; the third pass is served
    model.embed(sentences)
    policy = model.tokenizer.cache_policy
    assert policy.use_cache and policy.exits == 0
    model.embed(sentences)
    served_before = policy.served
    again = model.embed(sentences)
    assert policy.served - served_before >= 0.95 * len(sentences)
    np.testing.assert_allclose(again, load_model(bundle, word_cache_size=0).embed(sentences),
                               rtol=1e-5, atol=1e-6)  # fmt: skip


@pytest.mark.slow
def test_sentences_of_new_words_coming_back_never_fill_the_cache_with_whole_blocks(bundle):
    """A workload that comes back with nearly every word new (8 made-up words a sentence): each
    trial serves under HOLD_FLOOR, so none of eight passes puts more than its probes and one trial through
    the cache (a whole block's fill costs more than sentencepiece: benchmarks/RESULTS.md#embed-corpus)."""
    sentences = _new_words_stream(20_000, seed=1)
    model = load_model(bundle)
    policy = model.tokenizer.cache_policy
    blocks = -(-len(sentences) // 8192)
    for _ in range(8):
        given_before = policy.given
        got = model.embed(sentences)
        assert policy.given - given_before <= blocks * PROBE_SENTENCES + TRIAL_SENTENCES
    plain = load_model(bundle, word_cache_size=0)
    np.testing.assert_allclose(got, plain.embed(sentences), rtol=1e-5, atol=1e-6)


def test_the_policy_probes_first_returns_from_return_holds_and_leaves_below_stay() -> None:
    policy = CachePolicy()
    probe = policy.probe_rows(10_000)  # a new model probes
    assert len(probe) == PROBE_SENTENCES and probe[0] == 0 and probe[-1] == 9_999
    assert policy.probe_rows(PROBE_SENTENCES) is None  # a small block goes through whole
    assert policy.taken(10_000) == (0, 0)
    assert policy.taken(PROBE_SENTENCES) == (0, PROBE_SENTENCES)
    policy.probed(int(RETURN * 100) - 1, 100)
    assert not policy.use_cache and not policy.trial
    policy.probed(int(RETURN * 100), 100)
    # on trial: the first sentences of the next block try the cache, the rest do not
    assert policy.trial and not policy.use_cache and policy.probe_rows(10_000) is None
    assert policy.taken(10_000) == (0, TRIAL_SENTENCES) and policy.taken(500) == (0, 500)
    policy.block_served(int(HOLD_FLOOR * TRIAL_SENTENCES) + 1, TRIAL_SENTENCES)
    assert policy.use_cache and not policy.trial and policy.hold == HOLD_BLOCKS
    assert policy.taken(10_000) == (0, 10_000) and policy.probe_rows(10_000) is None
    for _ in range(HOLD_BLOCKS):  # kept while it learns the rest of the workload's words
        policy.block_served(int(HOLD_FLOOR * 100), 100)
        assert policy.use_cache
    policy.block_served(int(STAY * 100), 100)
    assert policy.use_cache
    policy.block_served(int(STAY * 100) - 1, 100)
    assert not policy.use_cache


def test_a_poor_trial_leaves_and_the_probe_moves() -> None:
    """A workload that comes back without its words (a second pass over a large corpus: its
    first probe falls on sentences probed before) leaves after a trial of a few sentences, not
    a whole block, and the next probes look at other sentences."""
    policy = CachePolicy()
    first_probe = policy.probe_rows(10_000)
    policy.probed(100, 100)
    assert policy.trial and policy.taken(10_000) == (0, TRIAL_SENTENCES)
    policy.block_served(int(HOLD_FLOOR * TRIAL_SENTENCES) - 1, TRIAL_SENTENCES)
    assert not policy.use_cache and not policy.trial and policy.taken(10_000) == (0, 0)
    moved = policy.probe_rows(10_000)
    assert len(moved) == PROBE_SENTENCES and moved[-1] <= 9_999
    assert not set(moved.tolist()) & set(first_probe.tolist())
    # the next trial looks at other sentences too (the first trial's were learned)
    policy.probed(100, 100)
    assert policy.taken(10_000) == (TRIAL_SENTENCES, 2 * TRIAL_SENTENCES)
    assert policy.taken(1_500) == (70, 1_094)  # (1,024 % 477: within the block)


def test_a_held_block_serving_little_leaves() -> None:
    policy = CachePolicy()
    policy.probed(100, 100)
    policy.block_served(TRIAL_SENTENCES, TRIAL_SENTENCES)
    assert policy.use_cache and policy.hold == HOLD_BLOCKS
    policy.block_served(int(HOLD_FLOOR * 100) - 1, 100)
    assert not policy.use_cache and policy.hold == 0 and policy.exits == 1


def test_a_trial_block_gives_the_same_vectors_and_ids(bundle) -> None:
    """A block on trial: its first sentences through the cache, the rest through sentencepiece,
    in their places (the same vectors and ids as sentencepiece alone)."""
    sentences = _new_words_stream(3 * TRIAL_SENTENCES, seed=2)
    sentences[5:5] = sentences[:5]  # some come back within the trial
    cached, plain = load_model(bundle), load_model(bundle, word_cache_size=0)
    for model_path in ("embed", "encode"):
        policy = cached.tokenizer.cache_policy
        policy.probed(100, 100)  # as if a probe had said the cache would pay
        if model_path == "embed":
            got = cached.embed(sentences)
            np.testing.assert_allclose(got, plain.embed(sentences), rtol=1e-5, atol=1e-6)
        else:
            got = cached.tokenizer.encode(sentences)
            want = plain.tokenizer.encode(sentences)
            assert np.array_equal(got.ids, want.ids) and np.array_equal(got.offsets, want.offsets)
        assert not policy.trial  # the trial was judged
