"""PSPModel.embed and PSPModel.score against independent numpy computations."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

from psp_core.inference.model import EmptySentenceWarning, PSPModel

EMPTY_SENTENCES = ["", " ", "   ", "\t", "\u3000 \u3000"]


@pytest.fixture(scope="module")
def sentences(toy) -> list[str]:
    """Sentences of varied lengths (so sorting by length reorders them), with empty ones mixed in."""
    result = [s for pair in toy.pairs(60, seed=11) for s in pair]
    result[5:5] = ["", "   "]
    result.append(" ".join(toy.source_words[:30]))
    result.insert(0, toy.source_words[0])
    return result


def numpy_mean_embedding(model: PSPModel, sentence: str) -> np.ndarray:
    """Mean of the table rows of the tokenizer's ids for one sentence, in float64."""
    ids = model.tokenizer.encode([sentence]).ids
    table = model.weight.numpy().astype(np.float64)
    if len(ids) == 0:
        return np.zeros(model.dim)
    return table[ids].mean(axis=0)


def numpy_cosine(a: np.ndarray, b: np.ndarray) -> float:
    na, nb = np.linalg.norm(a), np.linalg.norm(b)
    return 0.0 if na == 0 or nb == 0 else float(a @ b / (na * nb))


def test_embed_returns_float32_n_by_dim(model, sentences):
    vectors = model.embed(sentences)
    assert vectors.dtype == np.float32
    assert vectors.shape == (len(sentences), 16)


def test_embed_of_no_sentences_is_empty(model):
    vectors = model.embed([])
    assert vectors.shape == (0, 16)
    assert vectors.dtype == np.float32


def test_embed_keeps_input_order(model, sentences):
    together = model.embed(sentences)
    alone = np.stack([model.embed([s])[0] for s in sentences])
    np.testing.assert_allclose(together, alone, rtol=1e-6, atol=1e-7)
    # the sentences really are out of length order, so order had to be restored
    assert sorted(sentences, key=len) != sentences


def test_embed_is_the_mean_of_the_tokenizer_ids_rows(model, sentences):
    expected = np.stack([numpy_mean_embedding(model, s) for s in sentences])
    assert np.abs(expected).sum(axis=1).min() == 0.0  # the empty sentences
    assert (np.abs(expected).sum(axis=1) > 0).sum() > 100
    np.testing.assert_allclose(model.embed(sentences), expected, rtol=1e-5, atol=1e-6)


def test_embed_accepts_any_iterable(model, sentences):
    np.testing.assert_array_equal(model.embed(iter(sentences)), model.embed(sentences))


@pytest.mark.parametrize("normalize", [False, True])
def test_sentences_without_pieces_give_zero_vectors(model, toy, normalize):
    batch = [toy.pairs(1)[0][0], *EMPTY_SENTENCES]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        vectors = model.embed(batch, normalize=normalize)
    assert np.isfinite(vectors).all()
    np.testing.assert_array_equal(vectors[1:], 0.0)
    assert np.linalg.norm(vectors[0]) > 0
    # normalize=True promises unit vectors: the zero ones are not silent
    said = [str(w.message) for w in caught if issubclass(w.category, EmptySentenceWarning)]
    if normalize:
        assert said == [
            f"{len(EMPTY_SENTENCES)} of {len(batch)} sentences have nothing to embed "
            "(first: index 1): their vectors are zero, not unit length"
        ]
    else:
        assert said == []


@pytest.mark.parametrize("normalize", [False, True])
def test_a_batch_of_only_empty_sentences(model, normalize):
    vectors = model.embed(EMPTY_SENTENCES, normalize=normalize, batch_size=2)
    np.testing.assert_array_equal(vectors, np.zeros((len(EMPTY_SENTENCES), 16), np.float32))


def test_normalize_gives_unit_norms_in_the_same_direction(model, sentences):
    raw = model.embed(sentences)
    unit = model.embed(sentences, normalize=True)
    norms = np.linalg.norm(unit, axis=1)
    nonempty = np.linalg.norm(raw, axis=1) > 0
    np.testing.assert_allclose(norms[nonempty], 1.0, rtol=1e-5)
    np.testing.assert_array_equal(unit[~nonempty], 0.0)
    np.testing.assert_allclose(
        unit[nonempty],
        raw[nonempty] / np.linalg.norm(raw[nonempty], axis=1, keepdims=True),
        rtol=1e-5,
        atol=1e-7,
    )


@pytest.mark.parametrize("batch_size", [1, 3, 64, 10000])
@pytest.mark.parametrize("normalize", [False, True])
def test_embed_does_not_depend_on_batch_size(model, sentences, batch_size, normalize):
    reference = np.stack([numpy_mean_embedding(model, s) for s in sentences])
    if normalize:
        norms = np.linalg.norm(reference, axis=1, keepdims=True)
        reference = np.divide(reference, norms, out=np.zeros_like(reference), where=norms > 0)
    vectors = model.embed(sentences, batch_size=batch_size, normalize=normalize)
    np.testing.assert_allclose(vectors, reference, rtol=1e-5, atol=1e-6)


def test_embed_over_several_tokenize_blocks(model, toy):
    """More sentences than one tokenizer block (8192) with a batch size that does not divide it."""
    many = [s for pair in toy.pairs(4300, seed=3) for s in pair]
    many[::97] = [""] * len(many[::97])
    vectors = model.embed(many, batch_size=100)
    for index in [0, 1, 96, 97, 8191, 8192, 8199, 8599]:
        np.testing.assert_allclose(
            vectors[index], numpy_mean_embedding(model, many[index]), rtol=1e-5, atol=1e-6
        )


@pytest.mark.parametrize(("dim", "normalize"), [(None, False), (None, True), (5, True)])
def test_embed_into_a_reused_buffer(model, sentences, dim, normalize):
    """``out=``: the same vectors as a fresh array, written into the buffer itself (its first
    ``dim`` columns where ``dim`` is given), whatever the buffer held before."""
    expected = model.embed(sentences, normalize=normalize, dim=dim)
    buffer = np.full((len(sentences), model.dim), np.nan, dtype=np.float32)
    for _ in range(2):
        result = model.embed(sentences, normalize=normalize, dim=dim, out=buffer)
        np.testing.assert_array_equal(result, expected)
        assert np.shares_memory(result, buffer)
        buffer[:] = 7.0


@pytest.mark.parametrize(
    "buffer",
    [np.empty((3, 16), np.float32), np.empty((4, 16), np.float64), np.empty((16, 4), np.float32).T],
)
def test_a_buffer_of_the_wrong_shape_or_type_is_refused(model, buffer):
    with pytest.raises(ValueError, match="out must be"):
        model.embed(["a", "b", "c", "d"], out=buffer)


def test_a_single_string_is_a_type_error(model):
    with pytest.raises(TypeError, match="single string"):
        model.embed("a sentence, not a list")


@pytest.mark.parametrize("batch_size", [0, -1])
def test_batch_size_below_one_is_refused(model, batch_size):
    with pytest.raises(ValueError, match="batch_size"):
        model.embed(["abc"], batch_size=batch_size)


# --- score ----------------------------------------------------------------------------------------


def test_score_equals_numpy_cosine(model, toy):
    pairs = toy.pairs(40, seed=21)
    pairs += [(a, b) for (a, _), (_, b) in zip(pairs[:20], pairs[1:21], strict=True)]
    expected = [
        numpy_cosine(numpy_mean_embedding(model, a), numpy_mean_embedding(model, b))
        for a, b in pairs
    ]
    scores = model.score(pairs, batch_size=7)
    assert scores.dtype == np.float32
    assert scores.shape == (len(pairs),)
    np.testing.assert_allclose(scores, expected, rtol=1e-5, atol=1e-6)


def test_score_of_identical_sentences_is_one(model, toy):
    sentence = toy.pairs(1)[0][0]
    np.testing.assert_allclose(model.score([(sentence, sentence.upper())]), [1.0], rtol=1e-6)


@pytest.mark.parametrize(
    "pair", [("", "abc def"), ("abc def", ""), ("", ""), ("   ", "abc"), ("abc", "\t")]
)
def test_score_is_zero_when_a_side_has_no_pieces(model, pair):
    scores = model.score([pair])
    assert not np.isnan(scores).any()
    np.testing.assert_array_equal(scores, [0.0])


def test_score_of_no_pairs(model):
    scores = model.score([])
    assert scores.shape == (0,)


@pytest.mark.parametrize(
    "pairs",
    [
        [("only one",)],
        [("one", "two", "three")],
        [("fine", "pair"), ()],
    ],
    ids=["one element", "three elements", "empty tuple"],
)
def test_malformed_pairs_are_refused(model, pairs):
    with pytest.raises(ValueError, match="expected 2"):
        model.score(pairs)


def test_pair_with_a_non_string_side_is_refused(model):
    with pytest.raises(TypeError):
        model.score([("fine", None)])


@pytest.mark.parametrize(
    "pairs",
    [["ab", "cd"], ("ab", "cd")],  # strings, or one pair passed without the surrounding list
    ids=["strings", "bare pair"],
)
def test_strings_are_not_pairs(model, pairs):
    with pytest.raises(TypeError, match="pair 0 is a str"):
        model.score(pairs)
