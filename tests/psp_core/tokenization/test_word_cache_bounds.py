"""The word cache stays within its bounds whatever texts it is given: a word longer than
``MAX_CACHED_WORD_CHARS`` is never kept (nor remembered as seen), and the cache's memory (its
words, their ids, the words seen once) stops growing at ``max_bytes``; the ids stay
sentencepiece's either way."""

from __future__ import annotations

import random

import numpy as np

from psp_core.tokenization.tokenizer import Tokenizer, flatten_id_lists
from psp_core.tokenization.word_piece_cache import MAX_CACHED_WORD_CHARS, WordPieceCache


def _words(count: int, length: int, seed: int) -> list[str]:
    rng = random.Random(seed)
    return ["".join(rng.choice("abcdefghij") for _ in range(length)) for _ in range(count)]


def _same_as_sentencepiece(cache: WordPieceCache, texts: list[str]) -> None:
    got = cache.encode(texts)
    want = flatten_id_lists(cache.processor.Encode(texts, out_type=int))
    assert np.array_equal(got.ids, want.ids) and np.array_equal(got.offsets, want.offsets)


def test_a_long_word_is_never_kept(spm_path) -> None:
    cache = WordPieceCache(Tokenizer.from_file(spm_path).processor)
    long_words = _words(300, MAX_CACHED_WORD_CHARS + 1, seed=1)
    texts = [" ".join(long_words[i : i + 3]) for i in range(0, 300, 3)]
    for _ in range(3):  # seen again and again: still not kept
        _same_as_sentencepiece(cache, texts)
        assert cache.probe(texts) == 0
    assert len(cache) == 0 and cache.cached_bytes == 0 and cache.seen_bytes == 0
    short = _words(30, MAX_CACHED_WORD_CHARS, seed=2)
    for _ in range(2):
        _same_as_sentencepiece(cache, [" ".join(short)])
    assert len(cache) == 30  # a word of the longest kept length is kept


def test_the_cache_stops_growing_at_its_byte_budget(spm_path) -> None:
    budget = 400_000
    cache = WordPieceCache(Tokenizer.from_file(spm_path).processor, max_bytes=budget)
    batches = []
    for seed in range(12):
        words = _words(2_000, 40, seed=100 + seed)
        batches.append([" ".join(words[i : i + 10]) for i in range(0, 2_000, 10)])
    for texts in batches:  # each batch twice: every word on its second sighting
        for _ in range(2):
            _same_as_sentencepiece(cache, texts)
            # (one batch's words may land past the budget before it is seen to be spent)
            assert cache.cached_bytes < budget + 2_000 * 600
            assert cache.seen_bytes <= budget // 4 + 2_000 * 200
    assert cache.cached_bytes >= budget  # it was reached, and stopped there
    kept = len(cache)
    fresh = _words(2_000, 40, seed=999)
    for _ in range(2):  # more new words, twice: none kept
        _same_as_sentencepiece(cache, [" ".join(fresh[i : i + 10]) for i in range(0, 2_000, 10)])
    assert len(cache) == kept < 24_000
