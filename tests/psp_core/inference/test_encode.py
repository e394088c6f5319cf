"""``encode`` and ``similarity`` as a sentence-transformers user calls them: a string gives a
vector, a list an array, the options of the same names do what they do there, and the
similarity matrix equals sentence-transformers' own cosine similarity."""

from __future__ import annotations

import numpy as np
import pytest

SENTENCES = ["the old man reads a long letter.", "a cat sleeps", "", "ok ok ok"]


def test_a_string_gives_a_vector_and_a_list_an_array(model) -> None:
    one = model.encode(SENTENCES[0])
    assert one.shape == (model.dim,) and one.dtype == np.float32
    np.testing.assert_array_equal(one, model.embed(SENTENCES[:1])[0])
    many = model.encode(SENTENCES)
    assert many.shape == (4, model.dim)
    np.testing.assert_array_equal(many, model.embed(SENTENCES))
    listed = model.encode(SENTENCES, convert_to_numpy=False)
    assert isinstance(listed, list) and [v.shape for v in listed] == [(model.dim,)] * 4


def test_the_options_do_what_their_names_say(model) -> None:
    with pytest.warns(UserWarning, match="nothing to embed"):
        unit = model.encode(SENTENCES, normalize_embeddings=True)
    norms = np.linalg.norm(unit, axis=1)
    np.testing.assert_allclose(norms[[0, 1, 3]], 1.0, rtol=1e-5)
    assert norms[2] == 0.0  # the empty sentence stays a zero vector
    short = model.encode(SENTENCES[:2], truncate_dim=8)
    np.testing.assert_array_equal(short, model.embed(SENTENCES[:2])[:, :8])


def test_similarity_is_the_cosine_matrix(model) -> None:
    vectors = model.encode(SENTENCES)
    matrix = model.similarity(vectors, vectors[:2])
    assert matrix.shape == (4, 2)
    want = [[np.dot(a, b) / (np.linalg.norm(a) * np.linalg.norm(b)) for b in vectors[:2]]
            for a in vectors[[0, 1, 3]]]  # fmt: skip
    np.testing.assert_allclose(matrix[[0, 1, 3]], want, rtol=1e-5, atol=1e-6)
    assert np.all(matrix[2] == 0.0)  # a zero vector: 0, not NaN
    assert model.similarity(vectors[0], vectors[0]).shape == (1, 1)
    with pytest.raises(ValueError, match="dimensions"):
        model.similarity(vectors, vectors[:, :3])


def test_similarity_equals_sentence_transformers(model) -> None:
    util = pytest.importorskip("sentence_transformers.util", reason="the [export] extra")
    vectors = model.encode(SENTENCES[:2] + SENTENCES[3:])
    theirs = util.cos_sim(vectors, vectors).numpy()
    np.testing.assert_allclose(model.similarity(vectors, vectors), theirs, rtol=1e-5, atol=1e-6)
