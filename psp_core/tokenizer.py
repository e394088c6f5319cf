"""Sentence -> sentencepiece ids, exactly as the P-SP encoder sees them.

Steps (DESIGN section 5): lowercase, optional pre-tokenizer (jieba for Chinese), sentencepiece
ids, unknown pieces dropped unless the sentence has only unknown pieces (then one unknown id),
truncation to ``max_length`` pieces. A batch comes out as flat CSR arrays (ids + offsets), the
layout both ``nn.EmbeddingBag`` and the training HDF5 use.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Callable, Sequence
from itertools import chain
from pathlib import Path

import numpy as np
import sentencepiece as spm

from psp_core.csr import TokenBatch

log = logging.getLogger(__name__)

PRETOKENIZERS = ("none", "jieba")


def sha256_file(path: str | Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _jieba_segmenter() -> Callable[[str], str]:
    import jieba

    jieba.setLogLevel(logging.WARNING)

    def segment(text: str) -> str:
        return " ".join(token for token in jieba.cut(text) if not token.isspace())

    return segment


def make_pretokenizer(name: str) -> Callable[[str], str] | None:
    """Return the pre-tokenizer called ``name`` (``none`` gives ``None``)."""
    if name == "none":
        return None
    if name == "jieba":
        return _jieba_segmenter()
    raise ValueError(f"unknown pre-tokenizer {name!r}; expected one of {PRETOKENIZERS}")


def flatten_id_lists(id_lists: Sequence[Sequence[int]]) -> TokenBatch:
    """Turn a list of id lists into a :class:`TokenBatch` without a per-token Python loop."""
    lengths = np.fromiter(map(len, id_lists), dtype=np.int64, count=len(id_lists))
    offsets = np.zeros(len(id_lists) + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    ids = np.fromiter(chain.from_iterable(id_lists), dtype=np.int64, count=int(offsets[-1]))
    return TokenBatch(ids, offsets)


def clean_ids(batch: TokenBatch, unk_id: int, max_length: int) -> TokenBatch:
    """Drop unknown ids (keeping one when a sentence is nothing else) and truncate, vectorized."""
    ids, lengths = batch.ids, batch.lengths
    n = len(lengths)
    sentence_of = np.repeat(np.arange(n), lengths)
    keep = ids != unk_id
    kept_per_sentence = np.bincount(sentence_of[keep], minlength=n)
    only_unknown = (kept_per_sentence == 0) & (lengths > 0)
    if only_unknown.any():
        # keep the first (unknown) token of each all-unknown sentence
        first_positions = batch.offsets[:-1][only_unknown]
        keep[first_positions] = True
    ids, sentence_of = ids[keep], sentence_of[keep]
    new_lengths = np.bincount(sentence_of, minlength=n)
    if max_length > 0 and (new_lengths > max_length).any():
        starts = np.zeros(n + 1, dtype=np.int64)
        np.cumsum(new_lengths, out=starts[1:])
        position = np.arange(len(ids)) - starts[:-1][sentence_of]
        within = position < max_length
        ids, new_lengths = ids[within], np.minimum(new_lengths, max_length)
    offsets = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(new_lengths, out=offsets[1:])
    return TokenBatch(ids.astype(np.int64, copy=False), offsets)


class Tokenizer:
    """Lowercase, pre-tokenize, sentencepiece-encode and clean a batch of sentences.

    Args:
        model_proto: the serialized sentencepiece model (the bytes of ``sentencepiece.model``).
        lowercase: lowercase before encoding (the paper lowercases everything).
        pretokenizer: ``"none"`` or ``"jieba"`` (Chinese word segmentation).
        max_length: keep at most this many pieces per sentence (the paper uses 100; 0 = no limit).
        num_threads: sentencepiece threads for batch encoding (``-1``: its default).
    """

    def __init__(
        self,
        model_proto: bytes,
        *,
        lowercase: bool = True,
        pretokenizer: str = "none",
        max_length: int = 100,
        num_threads: int = 1,
    ) -> None:
        self.processor = spm.SentencePieceProcessor()
        try:
            self.processor.LoadFromSerializedProto(model_proto)
        except RuntimeError as error:
            raise ValueError(f"not a valid sentencepiece model ({error})") from error
        self.model_proto = model_proto
        self.sha256 = hashlib.sha256(model_proto).hexdigest()
        self.lowercase = lowercase
        self.pretokenizer_name = pretokenizer
        self._pretokenize = make_pretokenizer(pretokenizer)
        self.max_length = max_length
        self.num_threads = num_threads
        self.unk_id = self.processor.unk_id()

    @classmethod
    def from_file(cls, path: str | Path, **kwargs) -> Tokenizer:
        path = Path(path)
        if not path.is_file():
            raise FileNotFoundError(f"sentencepiece model {path} does not exist")
        try:
            return cls(path.read_bytes(), **kwargs)
        except ValueError as error:
            raise ValueError(f"{path}: {error}") from error

    @property
    def vocab_size(self) -> int:
        return self.processor.GetPieceSize()

    def normalize(self, sentences: Sequence[str]) -> list[str]:
        """Apply lowercasing and the pre-tokenizer, as done before sentencepiece."""
        texts = [s.lower() for s in sentences] if self.lowercase else list(sentences)
        if self._pretokenize is not None:
            texts = [self._pretokenize(t) for t in texts]
        return texts

    def encode(self, sentences: Sequence[str]) -> TokenBatch:
        """Encode ``sentences`` to a cleaned :class:`TokenBatch` (input order kept)."""
        if not sentences:
            return TokenBatch.empty()
        id_lists = self.processor.Encode(
            self.normalize(sentences), out_type=int, num_threads=self.num_threads
        )
        return clean_ids(flatten_id_lists(id_lists), self.unk_id, self.max_length)
