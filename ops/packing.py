"""Encoding sentence pairs and packing them into the training HDF5, in bounded memory."""

from __future__ import annotations

from collections.abc import Iterable
from itertools import islice
from pathlib import Path

from psp_core.tokenizer import Tokenizer
from psp_core.training_file import TrainingFileWriter


def pack_pairs(
    pairs: Iterable[tuple[str, str]],
    tokenizer: Tokenizer,
    output: str | Path,
    *,
    lang: str,
    kind: str = "bitext",
    seed: int = 0,
    chunk_size: int = 50_000,
) -> int:
    """Encode ``pairs`` chunk by chunk and write them, in the given order; returns the count.

    The pairs should already be shuffled (training reads the file in order).
    """
    iterator = iter(pairs)
    with TrainingFileWriter(
        output,
        vocab_size=tokenizer.vocab_size,
        spm_sha256=tokenizer.sha256,
        lang=lang,
        kind=kind,
        seed=seed,
    ) as writer:
        while chunk := list(islice(iterator, chunk_size)):
            writer.append(
                tokenizer.encode([p[0] for p in chunk]), tokenizer.encode([p[1] for p in chunk])
            )
        return writer.n_pairs
