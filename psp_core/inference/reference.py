"""The definition of a sentence's vector, in plain Python and numpy, one sentence at a time: what
:meth:`PSPModel.embed <psp_core.inference.model.PSPModel.embed>` computes, without any of its
speed machinery (the word cache and its policy, word sums, forked workers, the compiled or torch
sums, blocks, arrays mapped up front). The tests hold every fast path equal to it.

For a sentence ``s`` and a model with table ``E`` (a row per sentencepiece piece)::

    text   = s[:max_chars], lowercased, pre-tokenized (jieba/rjieba for Chinese; Tokenizer.normalize)
    pieces = sentencepiece's ids of text
    pieces = pieces without the unknown piece
    pieces = none at all when only bare word-boundary pieces (▁) are left of a sentence that
             had unknown ones: it has no piece the vocabulary knows
    pieces = the first max_length of them
    vector = mean of E[p] over pieces       (the zero vector when there are none)

then, when asked, the first ``dim`` dimensions, and division by the norm (a zero vector stays
zero). The sums here are float64; the fast paths sum in float32, so they agree to float32
rounding, not bit for bit.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

from psp_core.tokenization.tokenizer import MAX_SENTENCE_CHARS

if TYPE_CHECKING:
    from psp_core.inference.model import PSPModel


def sentence_pieces(model: PSPModel, sentence: str, max_chars: int | None) -> list[int]:
    """The piece ids whose rows make ``sentence``'s vector (see the module's text)."""
    tokenizer = model.tokenizer
    text = sentence if max_chars is None else sentence[:max_chars]
    [text] = tokenizer.normalize([text])
    pieces = tokenizer.processor.EncodeAsIds(text)
    known = [piece for piece in pieces if piece != tokenizer.unk_id]
    if len(known) < len(pieces) and all(piece == tokenizer.boundary_id for piece in known):
        known = []  # nothing but unknown pieces and the boundaries sentencepiece put before them
    return known[: tokenizer.max_length] if tokenizer.max_length > 0 else known


def reference_embed(
    model: PSPModel,
    sentences: Sequence[str],
    *,
    normalize: bool = False,
    dim: int | None = None,
    max_chars: int | None = MAX_SENTENCE_CHARS,
) -> np.ndarray:
    """``model.embed(sentences, normalize=..., dim=..., max_chars=...)`` by the definition:
    float32 ``[len(sentences), dim or model.dim]``."""
    width = model.dim if dim is None else dim
    vectors = np.zeros((len(sentences), width), dtype=np.float64)
    for row, sentence in enumerate(sentences):
        pieces = sentence_pieces(model, sentence, max_chars)
        if pieces:
            vectors[row] = model.table[pieces, :width].astype(np.float64).mean(axis=0)
    if normalize:
        norms = np.linalg.norm(vectors, axis=1, keepdims=True)
        np.divide(vectors, norms, out=vectors, where=norms > 0)
    return vectors.astype(np.float32)
