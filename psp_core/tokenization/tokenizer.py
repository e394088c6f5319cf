"""Sentence -> sentencepiece ids, exactly as the P-SP encoder sees them.

Steps (the paper's, as docs/method.md lists them): lowercase, optional pre-tokenizer (jieba for
Chinese), sentencepiece ids, unknown pieces dropped (a sentence with no piece the vocabulary
knows keeps none: nothing to embed), truncation to ``max_length`` pieces. A batch comes out as flat CSR arrays
(ids + offsets), the layout both ``nn.EmbeddingBag`` and the training HDF5 use.
"""

from __future__ import annotations

import hashlib
import logging
import re
import threading
from collections.abc import Callable, Sequence
from itertools import chain
from pathlib import Path

import numpy as np
import sentencepiece as spm

from psp_core.tokenization.csr import TokenBatch, row_sums
from psp_core.tokenization.word_cache_policy import CachePolicy
from psp_core.tokenization.word_piece_cache import (
    DEFAULT_MAX_BYTES,
    WordPieceCache,
    word_independent,
)

#: characters of a sentence that ``embed`` and ``psp embed`` read; a longer one is cut to them.
#: Far past what a model reads (its ``max_length`` pieces, the paper's 100), and it bounds the
#: memory sentencepiece takes for one sentence, many bytes per character of its input
#: (docs/python-api.md)
MAX_SENTENCE_CHARS = 100_000

log = logging.getLogger(__name__)

PRETOKENIZERS = ("none", "jieba", "rjieba", "rjieba_han")

#: runs of Han characters (CJK unified ideographs, extensions A-H, compatibility ideographs)
_HAN_RUN = re.compile(
    "[\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\U00020000-\U0002ebef\U00030000-\U0003134f]+"
)


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


def _rjieba_segmenter() -> Callable[[str], str]:
    """jieba-rs (the Rust port of jieba, through ``rjieba``): the same dictionary and HMM for
    unknown words, much faster; its speed and its agreement with jieba on the shared zh data:
    benchmarks/RESULTS.md#segmenter-compare."""
    import rjieba

    def segment(text: str) -> str:
        return " ".join(token for token in rjieba.cut(text) if not token.isspace())

    return segment


def _rjieba_han_segmenter() -> Callable[[str], str]:
    """rjieba on the runs of Han characters only, each run set apart by spaces; everything else
    (Latin, Arabic, Cyrillic words, punctuation, digits) is left as it is, so a model whose
    vocabulary serves every script gives a non-Chinese word the same pieces whether or not
    Chinese stands beside it (the multilingual model's pre-tokenizer)."""
    import rjieba

    def cut(run: re.Match) -> str:
        return (
            " " + " ".join(token for token in rjieba.cut(run.group()) if not token.isspace()) + " "
        )

    def segment(text: str) -> str:
        return _HAN_RUN.sub(cut, text)

    return segment


def make_pretokenizer(name: str) -> Callable[[str], str] | None:
    """Return the pre-tokenizer called ``name`` (``none`` gives ``None``)."""
    if name == "none":
        return None
    if name == "jieba":
        return _jieba_segmenter()
    if name == "rjieba":
        return _rjieba_segmenter()
    if name == "rjieba_han":
        return _rjieba_han_segmenter()
    raise ValueError(f"unknown pre-tokenizer {name!r}; expected one of {PRETOKENIZERS}")


def flatten_id_lists(id_lists: Sequence[Sequence[int]]) -> TokenBatch:
    """Turn a list of id lists into a :class:`TokenBatch` without a per-token Python loop."""
    lengths = np.fromiter(map(len, id_lists), dtype=np.int64, count=len(id_lists))
    offsets = np.zeros(len(id_lists) + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    ids = np.fromiter(chain.from_iterable(id_lists), dtype=np.int64, count=int(offsets[-1]))
    return TokenBatch(ids, offsets)


def clean_ids(
    batch: TokenBatch, unk_id: int, max_length: int, boundary_id: int | None = None
) -> TokenBatch:
    """Drop unknown ids and truncate, vectorized. A sentence with an unknown id whose other ids
    are all ``boundary_id`` (the bare word-boundary piece ``▁``, which sentencepiece puts before
    a word it cannot piece) has no piece the vocabulary knows: it keeps no id at all, so it has
    nothing to embed, rather than the boundary piece's vector that every such text would share.

    One pass over the ids finds the unknown ones; everything else costs in proportion to the
    unknown ids and the overlong sentences, which are few (and a batch with an unknown id counts
    its boundary pieces), so cleaning stays a small part of encoding
    (benchmarks/RESULTS.md#unknown-text).
    """
    ids, offsets, lengths = batch.ids, batch.offsets, batch.lengths
    unknown = np.flatnonzero(ids == unk_id)
    if len(unknown):
        owner = np.searchsorted(offsets, unknown, side="right") - 1
        unknown_per_sentence = np.bincount(owner, minlength=len(lengths))
        keep = np.ones(len(ids), dtype=bool)
        keep[unknown] = False
        lengths = lengths - unknown_per_sentence
        if boundary_id is not None and boundary_id >= 0:
            boundaries = row_sums(offsets, ids == boundary_id)
            nothing_known = (unknown_per_sentence > 0) & (boundaries == lengths)
            if nothing_known.any():
                keep &= ~np.repeat(nothing_known, batch.lengths)
                lengths[nothing_known] = 0
        ids = ids[keep]
        offsets = _offsets(lengths)
    if max_length > 0 and len(lengths) and lengths.max() > max_length:
        overlong = np.flatnonzero(lengths > max_length)
        excess = lengths[overlong] - max_length
        # the positions past max_length in each overlong sentence, as one vector of ranges
        starts = np.repeat(offsets[overlong] + max_length - np.cumsum(excess) + excess, excess)
        keep = np.ones(len(ids), dtype=bool)
        keep[starts + np.arange(len(starts))] = False
        ids = ids[keep]
        lengths = np.minimum(lengths, max_length)
        offsets = _offsets(lengths)
    return TokenBatch(ids.astype(np.int64, copy=False), offsets)


def boundary_piece_id(processor: spm.SentencePieceProcessor) -> int | None:
    """The id of the bare word-boundary piece ``▁`` in ``processor``'s vocabulary, or None."""
    piece = processor.PieceToId("\u2581")
    if piece == processor.unk_id() or processor.IdToPiece(piece) != "\u2581":
        return None
    return piece


def _offsets(lengths: np.ndarray) -> np.ndarray:
    offsets = np.zeros(len(lengths) + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    return offsets


def _refuse_non_strings(sentences: Sequence[str]) -> None:
    for index, sentence in enumerate(sentences):
        if not isinstance(sentence, str):
            raise TypeError(f"sentence {index} is a {type(sentence).__name__}, expected str")


class Tokenizer:
    """Lowercase, pre-tokenize, sentencepiece-encode and clean a batch of sentences.

    Args:
        model_proto: the serialized sentencepiece model (the bytes of ``sentencepiece.model``).
        lowercase: lowercase before encoding (the paper lowercases everything).
        pretokenizer: ``"none"``, ``"jieba"`` or ``"rjieba"`` (Chinese word segmentation: jieba,
            or jieba-rs, its faster Rust port), or ``"rjieba_han"`` (jieba-rs on the runs of Han
            characters only, for a vocabulary shared by every script).
        max_length: keep at most this many pieces per sentence (the reference code's 100; 0 = no
            limit).
        num_threads: sentencepiece threads for batch encoding (``-1``: its default).
        word_cache_size: the most distinct words whose pieces are kept
            (:class:`~psp_core.tokenization.word_piece_cache.WordPieceCache`, about 300 bytes each; the same ids
            as sentencepiece). 0, the default, sends every sentence to sentencepiece: a word is
            cached on its second sighting, at a cost that pays off only where words recur
            across calls (embedding: :func:`psp_core.load_model` turns it on), not in one pass
            over a corpus with a rich vocabulary (the preparation chain;
            benchmarks/RESULTS.md#embed-speed). Even when on, blocks use it only while it pays
            for itself (:attr:`cache_policy`, :mod:`psp_core.tokenization.word_cache_policy`).
        word_cache_bytes: the word cache's memory at most (its estimate); words over
            ``MAX_CACHED_WORD_CHARS`` characters are never cached.
    """

    def __init__(
        self,
        model_proto: bytes,
        *,
        lowercase: bool = True,
        pretokenizer: str = "none",
        max_length: int = 100,
        num_threads: int = 1,
        word_cache_size: int = 0,
        word_cache_bytes: int = DEFAULT_MAX_BYTES,
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
        #: the bare word-boundary piece ``▁`` (None where the vocabulary has none): with only
        #: unknown pieces beside it, a sentence has nothing to embed (:func:`clean_ids`)
        self.boundary_id = boundary_piece_id(self.processor)
        # the same ids as Encode, faster once words recur (psp_core/tokenization/word_piece_cache.py)
        self.word_cache_lock = threading.Lock()
        self._words = (
            WordPieceCache(self.processor, max_words=word_cache_size, max_bytes=word_cache_bytes)
            if word_cache_size > 0 and word_independent(model_proto)
            else None
        )
        #: whether the word cache is paying for itself (psp_core/tokenization/word_cache_policy.py)
        self.cache_policy = CachePolicy()

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

    @property
    def word_cache(self) -> WordPieceCache | None:
        """The cache of each word's ids (``None`` when off); hold :attr:`word_cache_lock` while
        using it."""
        return self._words

    def normalize(self, sentences: Sequence[str]) -> list[str]:
        """Apply lowercasing and the pre-tokenizer, as done before sentencepiece."""
        try:
            if self.lowercase:
                texts = [s.lower() for s in sentences]
            else:  # (+ "": a str stays itself, anything else raises)
                texts = [s + "" for s in sentences]
        except (AttributeError, TypeError):
            _refuse_non_strings(sentences)
            raise
        if self._pretokenize is not None:
            texts = [self._pretokenize(t) for t in texts]
        return texts

    def encode(self, sentences: Sequence[str]) -> TokenBatch:
        """Encode ``sentences`` to a cleaned :class:`TokenBatch` (input order kept)."""
        if not sentences:
            return TokenBatch.empty()
        return self.encode_normalized(self.normalize(sentences))

    def encode_normalized(self, texts: Sequence[str], *, use_cache: bool = True) -> TokenBatch:
        """:meth:`encode` of texts already through :meth:`normalize`. With a word cache, the
        texts go through it or to sentencepiece alone as :attr:`cache_policy` decides (the
        same ids either way); ``use_cache=False`` sends them to sentencepiece alone."""
        if not texts:
            return TokenBatch.empty()
        start, stop = (0, 0) if self._words is None or not use_cache else self.cache_takes(texts)
        if start == stop:
            batch = flatten_id_lists(
                self.processor.Encode(list(texts), out_type=int, num_threads=self.num_threads)
            )
            return clean_ids(batch, self.unk_id, self.max_length, self.boundary_id)
        with self.word_cache_lock:
            batch, served = self._words.encode_counted(texts[start:stop])
        self.cache_policy.block_served(served, stop - start)
        batch = clean_ids(batch, self.unk_id, self.max_length, self.boundary_id)
        if stop - start < len(texts):  # a trial: the rest to sentencepiece
            before = self.encode_normalized(texts[:start], use_cache=False)
            after = self.encode_normalized(texts[stop:], use_cache=False)
            batch = TokenBatch.concat([before, batch, after])
        return batch

    def cache_takes(self, texts: Sequence[str]) -> tuple[int, int]:
        """The rows ``(start, stop)`` of this block of normalized texts that go through the word
        cache (report what it served to :meth:`CachePolicy.block_served`): all while it pays,
        :data:`~psp_core.tokenization.word_cache_policy.TRIAL_SENTENCES` of them on trial. None (``start ==
        stop``) while the cache does not pay for itself: then a probe of a few of the texts is
        counted (their new words remembered) and the block goes to sentencepiece alone."""
        rows = self.cache_policy.probe_rows(len(texts))
        if rows is None:
            return self.cache_policy.taken(len(texts))
        with self.word_cache_lock:
            servable = self._words.probe([texts[i] for i in rows])
        self.cache_policy.probed(servable, len(rows))
        return 0, 0
