"""``embed`` over words' sums of piece vectors (``psp_core/inference/fast/word_vectors.py``) gives the piece
path's vectors: on the shared STS sentences and on the cases it must leave to the piece path
(unknown pieces, sentences of only unknown pieces, sentences past ``max_length``, near ties,
whitespace hazards, a full table of sums), in float32 and float16."""

from __future__ import annotations

import numpy as np
import pytest

from ops.training_data.sentencepiece_model import train_sentencepiece
from psp_core import BundleConfig, PSPModel, Tokenizer
from tests.conftest import require_shared_data

HARD = [
    "the old man reads a long letter.",
    "der alte mann liest einen langen brief",
    "",
    "   ",
    "about 300000 people live in 1000000 towns.",  # runs of zeros: near ties
    "neiiiiiiiiiiiiin neeeeeein 0000000000 aaaaaaaaaaaaaaaaa",
    "der alte\x1cmann liest\x0beinen\u0085brief",  # whitespace hazards
    "der alte mann\u00a0liest\u3000einen brief  twice  spaced ",
    "zero\u200bwidth and soft\u00adhyphen",
    "☃☃☃ ❄",  # only unknown pieces
    "the ☃ old ❄ man",  # unknown pieces dropped
    " ".join(["letter"] * 60 + ["brief"] * 60),  # past max_length (100 pieces)
    "THE OLD MAN Reads",
]


@pytest.fixture(scope="module")
def proto(german_numbers_spm) -> bytes:
    return german_numbers_spm.read_bytes()


def _models(proto: bytes, *, dim: int = 24, dtype: str = "float32", budget: int = 1 << 20):
    """The same table behind the word path and behind the piece path only."""
    pieces = Tokenizer(proto)
    table = np.random.default_rng(7).normal(size=(pieces.vocab_size, dim)).astype(np.float32)
    config = BundleConfig(dim=dim, vocab_size=pieces.vocab_size, spm_sha256=pieces.sha256)
    words = PSPModel(
        Tokenizer(proto, word_cache_size=10_000), table, config, dtype=dtype,
        word_vector_bytes=budget,
    )  # fmt: skip
    # the word path on every block, whether or not it pays (test_cache_policy.py tests that)
    words.tokenizer.cache_policy.use_cache = True
    words.tokenizer.cache_policy.hold = 10**9
    return words, PSPModel(pieces, table, config, dtype=dtype)


def _assert_same_vectors(got: np.ndarray, want: np.ndarray, tolerance: float) -> None:
    assert got.shape == want.shape
    zero_got, zero_want = ~got.any(axis=1), ~want.any(axis=1)
    np.testing.assert_array_equal(zero_got, zero_want)  # empty sentences stay exactly zero
    np.testing.assert_allclose(got, want, rtol=tolerance, atol=tolerance)


@pytest.mark.parametrize("dtype, tolerance", [("float32", 1e-5), ("float16", 2e-3)])
def test_the_word_path_gives_the_piece_paths_vectors_on_hard_cases(proto, dtype, tolerance):
    words, pieces = _models(proto, dtype=dtype)
    texts = HARD * 3  # seen more than once: the words are cached, then averaged as words
    for _ in range(3):
        _assert_same_vectors(words.embed(texts), pieces.embed(texts), tolerance)
    assert words._word_vectors.used > 0  # words of several pieces got rows of their own
    # the cases that must not take the word path did not: the same vectors as the pieces'
    # means, with unknown pieces dropped and 100 pieces at most
    # only unknown pieces (and the boundaries before them), cached or not: nothing to embed
    for model in (words, pieces):
        assert not model.embed(["☃☃☃ ❄", "❄"] * 3).any()


def test_a_full_table_of_sums_leaves_new_words_to_the_piece_path(proto):
    # room for 3 sums of dim 24 float32
    words, pieces = _models(proto, budget=3 * 24 * 4)
    texts = [f"word{n} and letter{n} about {n * 7919}" for n in range(200)] * 2
    _assert_same_vectors(words.embed(texts), pieces.embed(texts), 1e-5)
    vectors = words._word_vectors
    assert vectors.capacity == 3 and vectors.used == 3


def test_score_and_matryoshka_prefixes_agree_with_the_piece_path(proto):
    words, pieces = _models(proto, dim=32)
    pairs = [(HARD[i], HARD[-1 - i]) for i in range(len(HARD))] * 2
    np.testing.assert_allclose(words.score(pairs), pieces.score(pairs), atol=1e-5)
    _assert_same_vectors(words.embed(HARD * 2, dim=8), pieces.embed(HARD * 2, dim=8), 1e-5)


def test_no_word_path_without_a_word_cache_or_with_a_zero_budget(proto):
    words, pieces = _models(proto, budget=0)
    assert words._word_vectors is None and pieces._word_vectors is None
    # the table is the bundle's own: no copy, no extra rows
    assert words.weight.shape == (words.vocab_size, 24)


def test_a_non_string_sentence_is_refused_by_name(proto):
    words, _ = _models(proto)
    with pytest.raises(TypeError, match="sentence 1 is a NoneType, expected str"):
        words.embed(["fine", None])


@pytest.mark.slow
@pytest.mark.real_data
def test_the_word_path_agrees_on_every_shared_sts_sentence(tmp_path):
    eval_dir = require_shared_data("eval")
    sentences = [
        side
        for path in sorted(eval_dir.glob("sts*/**/*.tsv"))
        for line in path.read_text(encoding="utf-8").splitlines()
        for side in line.split("\t")[1:3]
    ]
    bitext = require_shared_data("bitext", "en-de")
    import gzip

    with gzip.open(bitext / "combined.en.gz", "rt", encoding="utf-8") as handle:
        sample = [line.strip().lower() for _, line in zip(range(20_000), handle, strict=False)]
    proto = train_sentencepiece(sample, tmp_path / "spm.model", vocab_size=4000).read_bytes()
    words, pieces = _models(proto, dim=64)
    words.embed(sentences)  # fills the caches
    got, want = words.embed(sentences), pieces.embed(sentences)
    _assert_same_vectors(got, want, 1e-5)
    norms = np.linalg.norm(got, axis=1) * np.linalg.norm(want, axis=1)
    cosine = (got * want).sum(axis=1)[norms > 0] / norms[norms > 0]
    assert cosine.min() > 0.99999
    assert words._word_vectors.used > 1000  # most sentences took the word path
