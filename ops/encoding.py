"""Encoding a shuffled pair file with the shared sentencepiece model into the training HDF5.

The pair file is streamed in batches; both sides of a batch go to sentencepiece in one call, so
its threads (``Tokenizer.num_threads``) share the work; truncation to ``Tokenizer.max_length``
pieces (the paper's 100) and unknown-piece handling are the tokenizer's. Pairs with a side that
encodes to no ids at all are dropped and counted as ``empty_after_encoding``.

The order of the input is kept: shuffle first (:func:`ops.shuffle.shuffle_pairs`), because
training reads the HDF5 in contiguous slices.

Chinese: the chain segments the text with jieba before sentencepiece is trained
(:func:`ops.segmentation.segment_pairs`), so the tokenizer used here must have pre-tokenizer
``"none"``; segmenting again would change the text. The model bundle built for inference later
gets ``"jieba"``, because raw user input is not segmented.
"""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np

from ops.pair_files import iter_pair_batches
from ops.stage_report import StageReport
from psp_core.tokenizer import Tokenizer
from psp_core.training_file import TrainingFileWriter

log = logging.getLogger(__name__)

DEFAULT_ENCODE_BATCH = 32_768
EMPTY_AFTER_ENCODING = "empty_after_encoding"
MAX_PIECES = 100  # the paper truncates every sentence to 100 sentencepiece pieces


def packing_tokenizer(spm_model: str | Path, *, num_threads: int = 2) -> Tokenizer:
    """The tokenizer that encodes a deduplicated (so already lowercased, and for zh already
    jieba-segmented) pair file: no second lowercasing or segmentation on the hot path, the
    paper's truncation. The model bundle keeps ``lowercase`` and gets ``"jieba"`` for zh,
    because raw user input is neither."""
    return Tokenizer.from_file(
        spm_model,
        lowercase=False,
        pretokenizer="none",
        max_length=MAX_PIECES,
        num_threads=num_threads,
    )


def training_file_writer(
    output: str | Path, tokenizer: Tokenizer, *, lang: str, kind: str, seed: int
) -> TrainingFileWriter:
    """A :class:`TrainingFileWriter` whose attrs describe ``tokenizer``'s model."""
    return TrainingFileWriter(
        output,
        vocab_size=tokenizer.vocab_size,
        spm_sha256=tokenizer.sha256,
        lang=lang,
        kind=kind,
        seed=seed,
    )


def encode_and_pack(
    input: str | Path,
    tokenizer: Tokenizer,
    output: str | Path,
    *,
    lang: str,
    kind: str,
    seed: int,
    batch_size: int = DEFAULT_ENCODE_BATCH,
) -> StageReport:
    """Encode both sides of the (already shuffled) pair file ``input`` and write the training HDF5.

    Args:
        input: pair file, in the order training should read it.
        tokenizer: the shared sentencepiece tokenizer (see the module note on ``pretokenizer``).
        output: the training HDF5, written atomically; attrs ``n_pairs``, ``vocab_size``,
            ``spm_sha256``, ``lang``, ``kind``, ``seed``, ``format_version``.
        lang: the partition's language code, recorded in the attrs.
        kind: ``"bitext"`` or ``"paraphrase"``.
        seed: the seed the pairs were shuffled with, recorded in the attrs.
        batch_size: pairs encoded per sentencepiece call (memory is a few batches).
    """
    report = StageReport("encode_and_pack")
    with training_file_writer(output, tokenizer, lang=lang, kind=kind, seed=seed) as writer:
        for batch in iter_pair_batches(input, batch_size):
            n = batch.num_rows
            report.n_in += n
            sentences = batch.column("src").to_pylist() + batch.column("tgt").to_pylist()
            both = tokenizer.encode(sentences)
            source, target = both.slice(0, n), both.slice(n, 2 * n)
            keep = (source.lengths > 0) & (target.lengths > 0)
            n_kept = int(keep.sum())
            if n_kept < n:
                report.drop(EMPTY_AFTER_ENCODING, n - n_kept)
                rows = np.flatnonzero(keep)
                source, target = source.take(rows), target.take(rows)
            if n_kept:
                writer.append(source, target)
        report.n_out = writer.n_pairs
    log.info("packed %d pairs of %s into %s", report.n_out, input, output)
    return report.finish()
