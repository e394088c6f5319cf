"""Training the shared sentencepiece model from a bounded random sample of a corpus."""

from __future__ import annotations

import io
import logging
import random
from collections.abc import Iterable
from pathlib import Path

import sentencepiece as spm

from ops.text_io import atomic_path

log = logging.getLogger(__name__)


def reservoir_sample(items: Iterable[str], size: int, seed: int) -> list[str]:
    """A uniform random sample of at most ``size`` items, in one pass (memory: the sample)."""
    rng = random.Random(seed)
    sample: list[str] = []
    for index, item in enumerate(items):
        if index < size:
            sample.append(item)
        else:
            slot = rng.randint(0, index)
            if slot < size:
                sample[slot] = item
    return sample


def train_sentencepiece(
    sentences: Iterable[str],
    output: str | Path,
    *,
    vocab_size: int = 50_000,
    character_coverage: float = 0.995,
    input_sentence_size: int = 10_000_000,
    model_type: str = "unigram",
    seed: int = 1,
    num_threads: int = 2,
) -> Path:
    """Train a sentencepiece model (the paper's settings by default) and write it atomically.

    ``sentences`` is streamed once; at most ``input_sentence_size`` of them, drawn uniformly,
    are kept for training. ``hard_vocab_limit`` is off, so a small corpus gets a smaller
    vocabulary instead of an error.
    """
    sample = [s for s in reservoir_sample(sentences, input_sentence_size, seed) if s.strip()]
    if not sample:
        raise ValueError("no non-empty sentences to train sentencepiece on")
    log.info("training sentencepiece (vocab %d) on %d sentences", vocab_size, len(sample))
    model = io.BytesIO()
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(sample),
        model_writer=model,
        vocab_size=vocab_size,
        character_coverage=character_coverage,
        model_type=model_type,
        hard_vocab_limit=False,
        num_threads=num_threads,
        minloglevel=2,
    )
    with atomic_path(output) as tmp:
        tmp.write_bytes(model.getvalue())
    return Path(output)
