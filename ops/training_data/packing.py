"""Encoding sentence pairs and packing them into the training HDF5, in bounded memory."""

from __future__ import annotations

from collections.abc import Iterable
from itertools import islice
from pathlib import Path

from ops.training_data.encoding import training_file_writer
from psp_core.tokenization.tokenizer import Tokenizer


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
    with training_file_writer(output, tokenizer, lang=lang, kind=kind, seed=seed) as writer:
        while chunk := list(islice(iterator, chunk_size)):
            writer.append(
                tokenizer.encode([p[0] for p in chunk]), tokenizer.encode([p[1] for p in chunk])
            )
        return writer.n_pairs
