"""Every fast path of ``embed`` gives the vectors of the plain definition
(``psp_core/inference/reference.py``) on varied text: the word cache on and off, the word sums
on and off, forked workers, each summing implementation, a float16 table, normalized and
truncated vectors, long, empty, unknown-only, mixed-case and repeated sentences. To float32
rounding; a float16 table to float16 rounding (its word sums are kept in float16)."""

from __future__ import annotations

import random
import warnings

import numpy as np
import pytest

from psp_core.extras import optional_module
from psp_core.inference.fast import pooling
from psp_core.inference.model import load_model
from psp_core.inference.reference import reference_embed, sentence_pieces
from tests.conftest import random_model


@pytest.fixture(scope="module")
def varied_text(toy) -> list[str]:
    """Sentences a corpus holds: 200 of the toy language's with the awkward ones among them,
    each seen about a hundred times in a shuffled order of 20,000, so that the word cache is
    taken and the word sums serve most blocks (they pay only for words seen again)."""
    rng = random.Random(5)
    sentences = [a if rng.random() < 0.5 else b for a, b in toy.pairs(200, seed=11)]
    awkward = [
        "",
        "   ",
        "👍",
        "🎉🎉 日本語のテキスト",
        "?",
        "UPPER and lower CASE",
        " ".join(sentences[:60]),  # far past max_length pieces
        "tab\tseparated\u00a0words\u3000here",
        "zero\u200bwidth",
    ]
    text = [rng.choice(sentences) for _ in range(20_000 - 10 * len(awkward))] + awkward * 10
    rng.shuffle(text)
    return text


@pytest.fixture(scope="module")
def bundle(tmp_path_factory, tokenizer):
    return random_model(tokenizer).save(tmp_path_factory.mktemp("reference") / "bundle")


@pytest.fixture(scope="module")
def definition(bundle, varied_text) -> dict[str, np.ndarray]:
    """The definition's vectors of ``varied_text``, for the float32 and the float16 table."""
    return {
        dtype: reference_embed(load_model(bundle, dtype=dtype), varied_text)
        for dtype in ("float32", "float16")
    }


def _assert_same(got: np.ndarray, want: np.ndarray, *, half: bool = False) -> None:
    """Equal to float32 rounding; with a float16 table (whose word sums are kept in float16),
    to float16 rounding."""
    assert got.dtype == np.float32 and got.shape == want.shape
    rtol, atol = (2e-3, 2e-3) if half else (1e-5, 1e-6)
    np.testing.assert_allclose(got, want, rtol=rtol, atol=atol)


@pytest.mark.parametrize(
    "options",
    [
        {},
        {"word_cache_size": 0},
        {"word_vector_bytes": 0},
        {"word_cache_size": 0, "word_vector_bytes": 0},
        {"workers": 2},
        {"dtype": "float16"},
    ],
    ids=["default", "no-word-cache", "no-word-sums", "sentencepiece-alone", "workers", "float16"],
)
def test_embed_equals_the_definition(bundle, varied_text, definition, options) -> None:
    model = load_model(bundle, **options)
    want = definition[options.get("dtype", "float32")]
    for _ in range(2):  # the second pass is served by what the first cached
        _assert_same(model.embed(varied_text, batch_size=64), want, half="dtype" in options)


@pytest.mark.parametrize("implementation", list(pooling.IMPLEMENTATIONS))
def test_each_summing_implementation_equals_the_definition(
    bundle, varied_text, definition, implementation, monkeypatch
) -> None:
    module, _ = pooling.IMPLEMENTATIONS[implementation]
    if optional_module(module) is None:
        pytest.skip(f"{module} is not installed here")
    monkeypatch.setattr(
        pooling, "IMPLEMENTATIONS", {implementation: pooling.IMPLEMENTATIONS[implementation]}
    )
    model = load_model(bundle, word_vector_bytes=0)
    _assert_same(model.embed(varied_text, batch_size=256), definition["float32"])


def test_normalized_truncated_and_cut_vectors_equal_the_definition(bundle, varied_text) -> None:
    model = load_model(bundle)
    for options in ({"normalize": True}, {"dim": 5}, {"dim": 5, "normalize": True}):
        with warnings.catch_warnings():  # (the empty sentences' warning, tested elsewhere)
            warnings.simplefilter("ignore")
            got = model.embed(varied_text, **options)
        _assert_same(got, reference_embed(model, varied_text, **options))
    got = model.embed(varied_text, max_chars=7)
    _assert_same(got, reference_embed(model, varied_text, max_chars=7))


def test_the_definition_itself(model) -> None:
    """What the definition says, on cases worked out by hand: nothing is the zero vector, an
    unknown piece is dropped, a text of unknown pieces and the word-boundary pieces
    sentencepiece put before them has no piece at all (not the boundary's), a long sentence
    keeps its first max_length pieces, case does not count."""
    tokenizer = model.tokenizer
    assert sentence_pieces(model, "", None) == []
    raw = tokenizer.processor.EncodeAsIds("👍")
    assert tokenizer.unk_id in raw and tokenizer.boundary_id in raw
    assert sentence_pieces(model, "👍", None) == []
    assert sentence_pieces(model, "👍 🎉", None) == []
    mixed = tokenizer.processor.EncodeAsIds("abc 👍")
    assert sentence_pieces(model, "abc 👍", None) == [p for p in mixed if p != tokenizer.unk_id]
    long = " ".join(["abc"] * 500)
    assert len(sentence_pieces(model, long, None)) == tokenizer.max_length
    pieces = sentence_pieces(model, "Abc Def", None)
    assert pieces == sentence_pieces(model, "abc def", None)
    vectors = reference_embed(model, ["", "Abc Def"])
    assert not vectors[0].any()
    np.testing.assert_allclose(vectors[1], model.table[pieces].mean(axis=0), rtol=1e-6)
