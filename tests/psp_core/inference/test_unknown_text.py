"""A text with no piece the vocabulary knows (emoji, a script the model never saw, a character
outside its pieces) is not given a vector that every such text shares: it has nothing to embed,
the zero vector with the same note as an empty text, on every path (the word cache's, the
pieces', forked workers), in the CLI and the server. A known word beside it keeps its vector."""

from __future__ import annotations

import numpy as np
import pytest

from psp_core.inference.model import EmptySentenceWarning
from psp_core.inference.reference import reference_embed
from tests.psp_core.cli_runs import run_psp

#: none of these has a piece of the tests' vocabulary (letters a-u), only unknown ones and the
#: bare word-boundary piece sentencepiece puts before each
UNKNOWN_TEXTS = ["👍", "🎉🎉", "日本語のテキスト", "ωψχ", "👍 🎉 ωψχ", "\u00bf\u00bf"]


def test_texts_the_vocabulary_lacks_are_not_one_shared_vector(model) -> None:
    tokenizer = model.tokenizer
    for text in UNKNOWN_TEXTS:  # the case: sentencepiece gives the boundary piece and unknowns
        raw = tokenizer.processor.EncodeAsIds(text.lower())
        assert tokenizer.unk_id in raw and set(raw) <= {tokenizer.unk_id, tokenizer.boundary_id}
    texts = [*UNKNOWN_TEXTS, "a cat", "a cat 👍"] * 3  # repeated: the word cache serves them
    with pytest.warns(EmptySentenceWarning) as caught:
        vectors = model.embed(texts, normalize=True)
    empty = [i for i, text in enumerate(texts) if text in UNKNOWN_TEXTS]
    assert caught[0].message.indices.tolist() == empty
    assert not vectors[empty].any()
    known = [i for i in range(len(texts)) if i not in empty]
    np.testing.assert_allclose(np.linalg.norm(vectors[known], axis=1), 1.0, rtol=1e-5)
    # a known word beside unknown ones keeps the boundary pieces: "a cat 👍" is not "a cat"
    assert not np.allclose(vectors[len(UNKNOWN_TEXTS)], vectors[len(UNKNOWN_TEXTS) + 1])
    np.testing.assert_allclose(
        model.embed(texts), reference_embed(model, texts), rtol=1e-5, atol=1e-6
    )
    # the same on several workers (each with its own cache)
    model.workers = 2
    np.testing.assert_array_equal(model.embed(texts * 700)[empty], 0.0)


def test_psp_embed_normalized_notes_them_once_by_file_and_line(tmp_path, bundle) -> None:
    source = tmp_path / "s.txt"
    source.write_text("a cat\n👍\n日本語のテキスト\nthe old man\n", encoding="utf-8")
    output = tmp_path / "v.npy"
    argv = ["embed", "--sentence-file", str(source), "--model", str(bundle), "--normalize"]
    done = run_psp([*argv, "--output-file", str(output)])
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr and "Warning:" not in done.stderr, done.stderr
    (note,) = [line for line in done.stderr.splitlines() if "nothing to embed" in line]
    assert "2 sentences have nothing to embed" in note and f"first: {source}:2)" in note
    vectors = np.load(output)
    assert not vectors[1:3].any() and vectors[[0, 3]].any()
