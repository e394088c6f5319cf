"""The inference API: ``load_model(path)``, ``model.embed(...)``, ``model.score(...)``."""

from __future__ import annotations

import logging
import warnings
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
from tqdm.auto import tqdm

from psp_core.devices import inference_device
from psp_core.extras import torch_module
from psp_core.inference.fast.multiprocess_embed import embed_forked, workers_for
from psp_core.inference.fast.pooling import weighted_sums
from psp_core.inference.fast.prefaulted_arrays import fresh_float32
from psp_core.inference.fast.word_vectors import DEFAULT_BUDGET_BYTES, WordVectors, extended_table
from psp_core.models.bundle import BundleConfig, load_bundle, save_bundle
from psp_core.tokenization.tokenizer import MAX_SENTENCE_CHARS, Tokenizer
from psp_core.tokenization.word_piece_cache import DEFAULT_MAX_BYTES as DEFAULT_WORD_CACHE_BYTES

if TYPE_CHECKING:
    import torch

_TOKENIZE_BLOCK = 8192

log = logging.getLogger(__name__)


#: the embedding table's types in memory
TABLE_DTYPES = {"float32": np.float32, "float16": np.float16}


#: sentences per averaging call: the fastest on 1 CPU thread, ahead of smaller batches, while
#: larger ones leave the CPU caches (benchmarks/RESULTS.md#embed-batch-size)
EMBED_BATCH_SIZE = 256


def cut_sentences(sentences: list[str], max_chars: int) -> list[str]:
    """``sentences``, those longer than ``max_chars`` characters cut to them (a new list, and a
    warning, only when one is)."""
    try:
        if not sentences or max(map(len, sentences)) <= max_chars:
            return sentences
    except TypeError:  # not strings: the tokenizer says which
        return sentences
    cut = sum(len(text) > max_chars for text in sentences)
    log.warning(
        "%d of %d sentences longer than %d characters were embedded from their first %d",
        cut,
        len(sentences),
        max_chars,
        max_chars,
    )
    return [text[:max_chars] if len(text) > max_chars else text for text in sentences]


class EmptySentenceWarning(UserWarning):
    """``embed(..., normalize=True)`` was given sentences with nothing to embed (empty, or no
    sentencepiece piece): their vectors are zero, not unit length. ``indices`` are their
    positions in the call's list (what ``psp`` turns into file lines)."""

    def __init__(
        self, message: str, indices: np.ndarray | None = None, source: str | None = None
    ) -> None:
        super().__init__(message)
        self.indices = np.zeros(0, np.int64) if indices is None else indices
        #: the file the list's items are the lines of, where the caller knows it
        self.source = source


@contextmanager
def collecting_empty_sentences(found: list[EmptySentenceWarning]) -> Iterator[None]:
    """Collect the :class:`EmptySentenceWarning` of the calls inside into ``found``, instead of
    showing them; every other warning is shown as it would have been."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", EmptySentenceWarning)
        yield
    for warning in caught:
        if isinstance(warning.message, EmptySentenceWarning):
            found.append(warning.message)
        else:
            warnings.warn_explicit(
                warning.message, warning.category, warning.filename, warning.lineno
            )


class PSPModel:
    """A trained P-SP model: a tokenizer and an embedding table.

    Use :func:`load_model` to read one from a bundle directory. With a tokenizer that keeps a
    word cache, on the CPU, ``embed`` averages each sentence over its words' sums of piece
    vectors (:mod:`psp_core.inference.fast.word_vectors`; ``word_vector_bytes`` bounds the memory of those
    sums, 0 turns the path off). On the CPU no torch is needed (:mod:`psp_core.inference.fast.pooling`);
    another ``device`` needs it.
    """

    def __init__(
        self,
        tokenizer: Tokenizer,
        embeddings: np.ndarray,
        config: BundleConfig,
        *,
        dtype: str = "float32",
        device: str | torch.device = "cpu",
        word_vector_bytes: int = DEFAULT_BUDGET_BYTES,
        workers: int = 1,
    ):
        if workers < 1:
            raise ValueError(f"workers must be >= 1, got {workers}")
        if embeddings.shape != (tokenizer.vocab_size, config.dim):
            raise ValueError(
                f"embedding table {embeddings.shape} does not fit vocabulary "
                f"{tokenizer.vocab_size} x dim {config.dim}"
            )
        if dtype not in TABLE_DTYPES:
            raise ValueError(f"dtype must be one of {list(TABLE_DTYPES)}, got {dtype!r}")
        self.tokenizer = tokenizer
        self.config = config
        self.dtype = dtype
        #: where the averaging runs: ``"cpu"`` or a torch device's name (``"cuda:0"``)
        self.device = inference_device(device)
        #: processes that share a large input to ``embed`` (psp_core/inference/fast/multiprocess_embed.py)
        self.workers = workers
        itemsize = np.dtype(TABLE_DTYPES[dtype]).itemsize
        capacity = word_vector_bytes // (config.dim * itemsize)
        self._word_vectors: WordVectors | None = None
        self._device_weight = None  # the table on another device than the CPU (a torch tensor)
        if tokenizer.word_cache is not None and self.device == "cpu" and capacity > 0:
            table = extended_table(embeddings, TABLE_DTYPES[dtype], capacity)
            #: the embedding table (a numpy array), the rows ``embed`` averages on the CPU
            self.table = table[: tokenizer.vocab_size]
            self._word_vectors = WordVectors(
                tokenizer.word_cache,
                table,
                vocab_size=tokenizer.vocab_size,
                unk_id=tokenizer.unk_id,
                max_length=tokenizer.max_length,
                boundary_id=tokenizer.boundary_id,
            )
        else:
            self.table = np.ascontiguousarray(embeddings, dtype=TABLE_DTYPES[dtype])
            if self.device != "cpu":
                torch = torch_module()
                self._device_weight = torch.from_numpy(self.table).to(self.device)

    @property
    def weight(self) -> torch.Tensor:
        """The embedding table as a torch tensor on the model's device (on the CPU, a view of
        :attr:`table`); imports torch, which embedding itself does not need."""
        if self._device_weight is not None:
            return self._device_weight
        import torch

        return torch.from_numpy(self.table)

    @property
    def dim(self) -> int:
        return self.config.dim

    @property
    def word_vectors(self) -> WordVectors | None:
        """The rows of each cached word's sum of piece vectors (``None`` when off: no word
        cache, not on the CPU, or ``word_vector_bytes=0``)."""
        return self._word_vectors

    @property
    def vocab_size(self) -> int:
        return self.config.vocab_size

    def save(self, directory: str | Path) -> Path:
        """Write the model as a bundle (always float32: a float16 table is a loading choice)."""
        table = self.table.astype(np.float32, copy=False)
        return save_bundle(directory, table, self.tokenizer.model_proto, self.config)

    def embed_ids(
        self, ids: np.ndarray, offsets: np.ndarray, out: np.ndarray | None = None
    ) -> np.ndarray:
        """Mean embeddings of already tokenized sentences (flat ids + offsets), float32
        ``[len(offsets) - 1, dim]``; written into ``out`` when given (a C-contiguous float32
        array of that shape). A sentence without ids gives a zero vector.

        On the CPU the mean is :func:`~psp_core.inference.fast.pooling.weighted_sums` with each id
        weighted by 1/its sentence's length: faster than ``embedding_bag``'s mean mode
        (benchmarks/RESULTS.md#embed-speed), the same vectors to float32 rounding."""
        count = len(offsets) - 1
        if out is None:
            out = np.empty((max(count, 0), self.dim), dtype=np.float32)
        if count <= 0:
            return out
        if self.device != "cpu":
            torch = torch_module()
            with torch.inference_mode():
                ids_tensor = torch.from_numpy(ids).to(self.device, non_blocking=True)
                starts = torch.from_numpy(offsets[:-1]).to(self.device, non_blocking=True)
                result = torch.nn.functional.embedding_bag(
                    ids_tensor, self._device_weight, starts, mode="mean"
                )
                out[:] = result.cpu().numpy()
            return out
        lengths = np.diff(offsets)
        weights = np.repeat(np.reciprocal(np.maximum(lengths, 1), dtype=np.float32), lengths)
        return weighted_sums(self.table, ids, offsets, weights, out=out)

    def embed(
        self,
        sentences: Sequence[str] | Iterable[str],
        batch_size: int = EMBED_BATCH_SIZE,
        normalize: bool = False,
        show_progress_bar: bool = False,
        dim: int | None = None,
        out: np.ndarray | None = None,
        max_chars: int | None = MAX_SENTENCE_CHARS,
    ) -> np.ndarray:
        """Embed sentences; returns float32 ``[n, dim]`` in input order.

        Sentences are tokenized in blocks and averaged ``batch_size`` at a time, in input
        order (a mean of piece vectors has no padding, so sorting by length gains nothing and
        costs the scattering of the rows back). An empty sentence (or one with no pieces) gives
        a zero vector: it has no direction, so it stays a zero vector when ``normalize`` is set
        (a dot product with it is 0, where a division by its norm would give NaN), and then an
        :class:`EmptySentenceWarning` says how many and the first one's index. ``dim`` keeps the first ``dim``
        dimensions (normalized after truncating): meant for models trained with
        ``matryoshka_dims`` (the mean of the pieces' prefixes is the prefix of their mean, so
        this is exact).

        ``out``: a C-contiguous float32 array of ``[n, self.dim]`` to write into instead of a new
        one (a caller embedding a stream chunk by chunk reuses one buffer, and skips the first
        touch of fresh memory each chunk); the result is then ``out``, or its first ``dim``
        columns (a view) where ``dim`` is given.

        ``max_chars``: a sentence longer than this is embedded from its first ``max_chars``
        characters (a warning counts them), so that one huge string never makes the tokenizer
        take memory in proportion to it; the default is far past the pieces a model reads
        (its ``max_length``). ``None`` embeds every character.
        """
        if dim is not None and not 1 <= dim <= self.dim:
            raise ValueError(f"dim must be in [1, {self.dim}], got {dim}")
        if isinstance(sentences, str):
            raise TypeError("embed expects a list of sentences, not a single string")
        sentences = sentences if isinstance(sentences, list) else list(sentences)
        if max_chars is not None:
            sentences = cut_sentences(sentences, max_chars)
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        if out is not None and (
            out.shape != (len(sentences), self.dim)
            or out.dtype != np.float32
            or not out.flags.c_contiguous
            or not out.flags.writeable
        ):
            raise ValueError(
                f"out must be a writable C-contiguous float32 array of shape "
                f"({len(sentences)}, {self.dim}), got {out.dtype} {out.shape}"
            )
        progress = tqdm(total=len(sentences), disable=not show_progress_bar, unit="sent")
        with progress:
            workers = workers_for(len(sentences), self.workers) if self.device == "cpu" else 1
            if workers > 1:
                output = embed_forked(
                    sentences,
                    out,
                    self.dim,
                    workers,
                    lambda texts, into, done: self._embed_blocks(texts, into, batch_size, done),
                    progress.update,
                    self.tokenizer.word_cache_lock,
                )
            else:
                output = fresh_float32((len(sentences), self.dim)) if out is None else out
                self._embed_blocks(sentences, output, batch_size, progress.update)
        if dim is not None and dim < self.dim:
            output = output[:, :dim] if out is not None else np.ascontiguousarray(output[:, :dim])
        if normalize:
            norms = np.linalg.norm(output, axis=1, keepdims=True)
            np.divide(output, norms, out=output, where=norms > 0)
            zero = np.flatnonzero(norms[:, 0] == 0)
            if len(zero):
                message = (
                    f"{len(zero)} of {len(output)} sentences have nothing to embed (first: index "
                    f"{zero[0]}): their vectors are zero, not unit length"
                )
                warnings.warn(EmptySentenceWarning(message, zero), stacklevel=2)
        return output

    def _embed_blocks(
        self, sentences: list[str], output: np.ndarray, batch_size: int, done
    ) -> None:
        """Embed ``sentences`` into ``output`` block by block (tokenized a block at a time,
        averaged ``batch_size`` at a time), calling ``done(k)`` after each block of ``k``."""
        block = max(_TOKENIZE_BLOCK - _TOKENIZE_BLOCK % batch_size, batch_size)
        for block_start in range(0, len(sentences), block):
            block_sentences = sentences[block_start : block_start + block]
            target = output[block_start : block_start + len(block_sentences)]
            if self._word_vectors is None:
                self._embed_pieces(block_sentences, target, batch_size)
            else:
                self._embed_words(block_sentences, target, batch_size)
            done(len(block_sentences))

    def _embed_words(self, sentences: list[str], out: np.ndarray, batch_size: int) -> None:
        """Average ``sentences`` into ``out`` over their words' sums where the word cache can,
        the others over their pieces from sentencepiece alone (never through the cache twice).
        Which sentences try the cache: all of them, the first of a block on trial, or a probe
        while it does not pay for itself (:class:`~psp_core.tokenization.word_cache_policy.CachePolicy`)."""
        texts = self.tokenizer.normalize(sentences)
        start, stop = self.tokenizer.cache_takes(texts)
        for low, high in ((0, start), (stop, len(texts))):  # (all of them, or all but a trial)
            if high > low:
                rest = self.tokenizer.encode_normalized(texts[low:high], use_cache=False)
                self._average(rest, out[low:high], batch_size)
        if start == stop:
            return
        texts, out = texts[start:stop], out[start:stop]
        with self.tokenizer.word_cache_lock:
            left = self._word_vectors.embed(texts, out, batch_size)
        self.tokenizer.cache_policy.block_served(len(texts) - len(left), len(texts))
        if len(left):
            tokens = self.tokenizer.encode_normalized([texts[i] for i in left], use_cache=False)
            rest = np.empty((len(left), self.dim), dtype=np.float32)
            self._average(tokens, rest, batch_size)
            out[left] = rest

    def _embed_pieces(self, sentences: list[str], out: np.ndarray, batch_size: int) -> None:
        """Tokenize ``sentences`` and average their pieces into ``out``, ``batch_size`` at a
        time."""
        self._average(self.tokenizer.encode(sentences), out, batch_size)

    def _average(self, tokens, out: np.ndarray, batch_size: int) -> None:
        """Average the pieces of ``tokens`` (a TokenBatch) into ``out``, ``batch_size`` rows at
        a time."""
        for start in range(0, len(tokens), batch_size):
            stop = min(start + batch_size, len(tokens))
            low, high = tokens.offsets[start], tokens.offsets[stop]
            self.embed_ids(
                tokens.ids[low:high],
                tokens.offsets[start : stop + 1] - low,
                out=out[start:stop],
            )

    def encode(
        self,
        sentences: str | Sequence[str],
        batch_size: int = EMBED_BATCH_SIZE,
        show_progress_bar: bool | None = None,
        normalize_embeddings: bool = False,
        convert_to_numpy: bool = True,
        precision: str = "float32",
        truncate_dim: int | None = None,
    ) -> np.ndarray | list[np.ndarray]:
        """:meth:`embed` as sentence-transformers' ``SentenceTransformer.encode`` is called: a
        string gives a 1-D vector, a list a 2-D array (``convert_to_numpy=False``: a list of
        1-D vectors); ``normalize_embeddings`` gives unit vectors, ``truncate_dim`` the first
        dimensions (:meth:`embed`'s ``dim``). ``precision``: ``float32``, the vectors' own, or
        ``int8``/``uint8``/``binary``/``ubinary`` as sentence-transformers gives them
        (:func:`~psp_core.inference.quantize.quantize_embeddings`; int8's ranges from the
        sentences themselves, as there: for codes that compare across calls, embed in float32
        and quantize with ranges from a sample)."""
        from psp_core.inference.quantize import PRECISIONS, quantize_embeddings

        if precision not in PRECISIONS:
            raise ValueError(f"precision {precision!r}: expected one of {', '.join(PRECISIONS)}")
        single = isinstance(sentences, str)
        if single and precision.endswith("int8"):
            raise ValueError(
                f"precision {precision!r} of one sentence: its ranges come from several; embed "
                "in float32 and call quantize_embeddings with ranges from a sample"
            )
        vectors = self.embed(
            [sentences] if single else sentences,
            batch_size=batch_size,
            normalize=normalize_embeddings,
            show_progress_bar=bool(show_progress_bar),
            dim=truncate_dim,
        )
        vectors = quantize_embeddings(vectors, precision)
        if single:
            return vectors[0]
        return vectors if convert_to_numpy else list(vectors)

    @staticmethod
    def similarity(first: np.ndarray, second: np.ndarray) -> np.ndarray:
        """The cosine similarity of every vector of ``first`` with every one of ``second``
        (``[n, m]``; 1-D vectors count as one row), as sentence-transformers'
        ``model.similarity``; 0 where either vector is zero (a sentence with nothing to
        embed)."""
        first = np.atleast_2d(np.asarray(first, dtype=np.float32))
        second = np.atleast_2d(np.asarray(second, dtype=np.float32))
        if first.shape[1] != second.shape[1]:
            raise ValueError(f"vectors of {first.shape[1]} and {second.shape[1]} dimensions")

        def unit(rows: np.ndarray) -> np.ndarray:
            norms = np.linalg.norm(rows, axis=1, keepdims=True)
            return np.divide(rows, norms, out=np.zeros_like(rows), where=norms > 0)

        return unit(first) @ unit(second).T

    def score(
        self,
        pairs: Sequence[tuple[str, str]],
        batch_size: int = EMBED_BATCH_SIZE,
        show_progress_bar: bool = False,
        dim: int | None = None,
    ) -> np.ndarray:
        """Cosine similarity of each ``(s1, s2)`` pair; 0.0 when either side has no pieces.
        ``dim``: compare the first ``dim`` dimensions only (see :meth:`embed`)."""
        pairs = list(pairs)
        for index, pair in enumerate(pairs):
            if isinstance(pair, str) or not isinstance(pair, tuple | list):
                raise TypeError(
                    f"pair {index} is a {type(pair).__name__}, expected an (s1, s2) tuple"
                )
            if len(pair) != 2:
                raise ValueError(f"pair {index} has {len(pair)} elements, expected 2")
        left = self.embed([p[0] for p in pairs], batch_size, True, show_progress_bar, dim)
        right = self.embed([p[1] for p in pairs], batch_size, True, show_progress_bar, dim)
        return np.einsum("ij,ij->i", left, right).astype(np.float32)


def load_model(
    path: str | Path,
    *,
    num_threads: int = 1,
    dtype: str = "float32",
    device: str = "cpu",
    word_cache_size: int = 500_000,
    word_vector_bytes: int = DEFAULT_BUDGET_BYTES,
    workers: int = 1,
    word_cache_bytes: int = DEFAULT_WORD_CACHE_BYTES,
    revision: str | None = None,
) -> PSPModel:
    """Load a model bundle directory (validated; see :mod:`psp_core.models.bundle`).

    Args:
        path: the bundle directory, or a bundle on the Hugging Face Hub:
            ``hf://ORG/NAME[/FOLDER][@REVISION]`` (:mod:`psp_core.models.hub`, the ``hub``
            extra; fetched into the Hub's cache, offline from it with ``HF_HUB_OFFLINE=1``).
        num_threads: sentencepiece threads used when tokenizing.
        dtype: the embedding table in memory: ``"float32"`` (as stored) or ``"float16"`` (half
            the memory; vectors are still returned as float32; its speed and STS scores:
            benchmarks/RESULTS.md#float16-compare).
        device: where the table lives and the averaging runs: ``"cpu"``, ``"cuda"``,
            ``"cuda:1"``, or ``"auto"`` (cuda when present). Tokenization stays on the CPU. A
            device other than the CPU needs torch (the ``[train]`` extra); ``"auto"`` is the CPU
            without it.
        word_cache_size: distinct words whose sentencepiece ids the tokenizer keeps
            (:mod:`psp_core.tokenization.word_piece_cache`: the same ids, faster once words recur; 0 turns it off).
            It is used only while it pays for itself (:mod:`psp_core.tokenization.word_cache_policy`): on one pass
            over distinct sentences it only probes (about as fast as sentencepiece alone), on
            sentences embedded again and again it serves nearly all of them, much faster
            (benchmarks/RESULTS.md#embed-corpus).
        word_cache_bytes: the word cache's memory at most (an estimate of its words, their ids
            and the words seen once; default 256 MiB); words over 64 characters are never
            cached.
        word_vector_bytes: memory for the sums of piece vectors of cached words of several
            pieces, which ``embed`` averages over instead of their pieces
            (:mod:`psp_core.inference.fast.word_vectors`; default 128 MiB; 0 turns the path off).
        workers: processes that share a large input to ``embed`` on the CPU (Linux): the
            calling process and ``workers - 1`` forked children, each embedding a contiguous
            share on one thread (:mod:`psp_core.inference.fast.multiprocess_embed`; at least 16,384 sentences a
            share, so small inputs stay in one process). On a first pass over a corpus a process
            per core gains more than ``num_threads`` does (benchmarks/RESULTS.md#embed-corpus).
        revision: a Hub model's branch, tag or commit (or ``@REVISION`` in ``path``).
    """
    from psp_core.models.hub import model_folder

    device = inference_device(device)  # a device this machine lacks fails before reading
    config, spm_proto, embeddings = load_bundle(model_folder(path, revision))
    tokenizer = Tokenizer(
        spm_proto,
        lowercase=config.lowercase,
        pretokenizer=config.pretokenizer,
        max_length=config.max_length,
        num_threads=num_threads,
        word_cache_size=word_cache_size,
        word_cache_bytes=word_cache_bytes,
    )
    return PSPModel(
        tokenizer,
        embeddings,
        config,
        dtype=dtype,
        device=device,
        word_vector_bytes=word_vector_bytes,
        workers=workers,
    )
