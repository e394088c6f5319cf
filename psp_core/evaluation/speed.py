"""Embedding speed: sentences per second of ``PSPModel.embed`` on a fixed set of real sentences.

The set is both sides of every STS file in an evaluation directory (``sts/*/*.tsv`` and
``sts17/*.tsv``, in sorted file order, not deduplicated), embedded in batches of 64 sorted by
length, as in the paper. Two figures:

* ``with_tokenization``: ``model.embed(sentences, batch_size=64)`` (lowercasing, sentencepiece,
  sorting and the embedding bags);
* ``without_tokenization``: the sentences tokenized once beforehand, sorted by length, then only
  ``model.embed_ids`` on consecutive slices of 64.

Each is the best of ``repeats`` timed runs after one warm-up.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from psp_core.evaluation.sts import read_sts_file

if TYPE_CHECKING:
    from psp_core.inference.model import PSPModel


@dataclass(frozen=True)
class SpeedResult:
    """Sentences per second (best of ``repeats``)."""

    sentences: int
    batch_size: int
    repeats: int
    torch_threads: int
    with_tokenization: float
    without_tokenization: float

    def as_dict(self) -> dict:
        return asdict(self)


def speed_sentences(eval_dir: str | Path) -> list[str]:
    """Both sides of every STS file under ``eval_dir`` (``sts/*/*.tsv`` then ``sts17/*.tsv``)."""
    root = Path(eval_dir)
    files = sorted((root / "sts").glob("*/*.tsv")) + sorted((root / "sts17").glob("*.tsv"))
    sentences: list[str] = []
    for path in files:
        pairs = read_sts_file(path)
        for first, second in zip(pairs.first, pairs.second, strict=True):
            sentences += [first, second]
    return sentences


def _best_rate(function, count: int, repeats: int) -> float:
    function()  # warm-up
    best = float("inf")
    for _ in range(repeats):
        started = time.perf_counter()
        function()
        best = min(best, time.perf_counter() - started)
    return count / best if best > 0 else float("inf")


def measure_speed(
    model: PSPModel, sentences: list[str], *, batch_size: int = 64, repeats: int = 3
) -> SpeedResult:
    """Time ``model.embed`` with and without tokenization on ``sentences``."""
    import torch  # imported when used: the code location loads without it

    if not sentences:
        raise ValueError("no sentences to time")
    if repeats < 1:
        raise ValueError(f"repeats must be >= 1, got {repeats}")
    order = np.argsort(np.fromiter(map(len, sentences), np.int64, len(sentences)), kind="stable")
    tokens = model.tokenizer.encode([sentences[i] for i in order])
    ids, offsets = tokens.ids, tokens.offsets

    def embed_pretokenized() -> np.ndarray:
        output = np.empty((len(sentences), model.dim), dtype=np.float32)
        for start in range(0, len(sentences), batch_size):
            stop = min(start + batch_size, len(sentences))
            low, high = offsets[start], offsets[stop]
            output[start:stop] = model.embed_ids(ids[low:high], offsets[start : stop + 1] - low)
        return output

    return SpeedResult(
        sentences=len(sentences),
        batch_size=batch_size,
        repeats=repeats,
        torch_threads=torch.get_num_threads(),
        with_tokenization=_best_rate(
            lambda: model.embed(sentences, batch_size=batch_size), len(sentences), repeats
        ),
        without_tokenization=_best_rate(embed_pretokenized, len(sentences), repeats),
    )
