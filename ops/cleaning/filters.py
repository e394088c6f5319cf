"""Length, score and trigram-overlap filters (the paper's reference semantics), OpusFilter style.

Scoring is separate from deciding: the scorers below take a batch and return numpy arrays;
:class:`FilterConfig` holds the thresholds (the paper's defaults) and :func:`filter_pairs`
applies them, counting what each filter removed.

* bitext: the English (``src``) side has 3..100 whitespace tokens;
* paraphrase (ParaNMT): the mean of the two sides' whitespace token counts is in 5..40, the
  paraphrase score is in [0.4, 1.0], and the trigram overlap is at most 0.7. A pair without a
  score (null or NaN: the two-column ParaNMT file, whose makers filtered it already, or an
  unscored part concatenated with scored ones) is not judged by the score filter; the other
  filters apply to it, and the report's ``notes`` count the kept ones as
  ``score_filter_skipped``.

**Trigram overlap** of a pair: lowercase and word-tokenize both sides (:func:`word_tokenize`);
take the side with fewer trigrams (the source side on a tie); overlap = the number of its
trigrams, counted with repeats, that occur in the other side, divided by its number of
trigrams; 0 when it has none.

**Tokenizer**: NLTK's ``word_tokenize`` needs the punkt data download, so :func:`word_tokenize`
is one regular expression that reproduces the Treebank tokenizer's splits that matter for
trigrams: punctuation becomes its own token (``...`` and ``--`` stay whole), except periods,
commas and colons between word characters (``u.s``, ``3.14``, ``1,000``, ``10:30``);
contractions split Treebank style (``don't`` -> ``do n't``, ``it's`` -> ``it 's``,
``cannot`` -> ``can not``, ``gonna`` -> ``gon na``); hyphens and other apostrophes inside a
word stay (``well-known``, ``o'neill``). Unlike ``word_tokenize`` it does not sentence-split
first (a period in the middle of a line stays attached only between word characters, so
``end. next`` still splits) and keeps double quotes as ``"`` instead of Treebank's ``` `` ```/``''``.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import numpy as np
import pyarrow as pa

from ops.pairs.pair_files import (
    DEFAULT_BATCH,
    PairWriter,
    iter_pair_batches,
    pair_file_info,
)
from ops.progress import Progress
from ops.stage_report import StageReport

Kind = Literal["bitext", "paraphrase"]
KINDS = ("bitext", "paraphrase")


@dataclass(frozen=True)
class FilterConfig:
    """Filter thresholds; the defaults are the paper's (inclusive bounds)."""

    bitext_min_tokens: int = 3
    bitext_max_tokens: int = 100
    paraphrase_min_mean_tokens: float = 5.0
    paraphrase_max_mean_tokens: float = 40.0
    min_score: float = 0.4
    max_score: float = 1.0
    max_trigram_overlap: float = 0.7


_TOKEN = re.compile(
    r"""
    \bcan(?=not\b) | \b(?:gon|wan)(?=na\b) | \bgot(?=ta\b) | \b(?:gim|lem)(?=me\b)
    | [^\W_]+?(?=n't\b)                           # "do" of don't, "ca" of can't
    | n't\b
    | '(?:s|m|d|ll|re|ve)\b                       # 's 'm 'd 'll 're 've
    | \w+(?:(?:[-.]|[,:](?=\d)|'(?!(?:s|m|d|ll|re|ve|t)\b))\w+)*
    | \.\.+ | -- | \S                              # ellipsis, double dash, any other symbol
    """,
    re.VERBOSE,
)


def word_tokenize(text: str) -> list[str]:
    """Treebank-like word tokens of ``text`` (see the module docstring for the rules)."""
    return _TOKEN.findall(text)


def _trigrams(text: str) -> list[tuple[str, str, str]]:
    tokens = word_tokenize(text.lower())
    return list(zip(tokens, tokens[1:], tokens[2:], strict=False))


def trigram_overlap(first: str, second: str) -> float:
    """Share of the trigrams of the side with fewer trigrams that occur in the other side."""
    a, b = _trigrams(first), _trigrams(second)
    fewer, other = (a, b) if len(a) <= len(b) else (b, a)
    if not fewer:
        return 0.0
    present = set(other)
    return sum(trigram in present for trigram in fewer) / len(fewer)


def trigram_overlaps(src: Sequence[str], tgt: Sequence[str]) -> np.ndarray:
    """:func:`trigram_overlap` of each pair, as float64."""
    return np.fromiter(map(trigram_overlap, src, tgt), dtype=np.float64, count=len(src))


def whitespace_token_counts(texts: pa.Array | Sequence[str]) -> np.ndarray:
    """Number of whitespace-separated tokens of each text (``len(text.split())``).

    A Python loop over the strings: faster than Arrow's ``utf8_split_whitespace`` for this
    count (which also counts empty strings at the edges).
    """
    if isinstance(texts, pa.Array | pa.ChunkedArray):
        texts = texts.to_pylist()
    return np.fromiter((len(text.split()) for text in texts), dtype=np.int64, count=len(texts))


def mean_token_counts(src: pa.Array | Sequence[str], tgt: pa.Array | Sequence[str]) -> np.ndarray:
    """Mean of the two sides' whitespace token counts (ParaNMT's length measure)."""
    return (whitespace_token_counts(src) + whitespace_token_counts(tgt)) / 2.0


def _bitext_verdicts(batch: pa.RecordBatch, config: FilterConfig) -> list[tuple[str, np.ndarray]]:
    counts = whitespace_token_counts(batch.column("src"))
    return [
        ("src_too_short", counts < config.bitext_min_tokens),
        ("src_too_long", counts > config.bitext_max_tokens),
    ]


def _paraphrase_verdicts(
    batch: pa.RecordBatch, config: FilterConfig
) -> list[tuple[str, np.ndarray]]:
    src, tgt = batch.column("src").to_pylist(), batch.column("tgt").to_pylist()
    mean = mean_token_counts(src, tgt)
    score = batch.column("score").to_numpy(zero_copy_only=False).astype(np.float64)
    # a missing score is NaN here, which no comparison holds for: such pairs pass both
    failed = [
        ("too_short", mean < config.paraphrase_min_mean_tokens),
        ("too_long", mean > config.paraphrase_max_mean_tokens),
        ("score_too_low", score < config.min_score),
        ("score_too_high", score > config.max_score),
    ]
    # the trigram scorer is the expensive one: score only the pairs every cheaper filter kept
    alive = np.flatnonzero(~np.logical_or.reduce([mask for _, mask in failed]))
    overlap = np.zeros(len(src))
    overlap[alive] = trigram_overlaps([src[i] for i in alive], [tgt[i] for i in alive])
    failed.append(("trigram_overlap", overlap > config.max_trigram_overlap))
    return failed


def filter_pairs(
    input: str | Path,
    output: str | Path,
    *,
    kind: Kind,
    config: FilterConfig = FilterConfig(),
    batch_size: int = DEFAULT_BATCH,
) -> StageReport:
    """Keep the pairs that pass every filter of ``kind``; count drops per filter.

    Each dropped pair is counted once, under the first filter it fails, in this order:
    bitext ``src_too_short``, ``src_too_long``; paraphrase ``too_short``, ``too_long``
    (mean length), ``score_too_low``, ``score_too_high``, ``trigram_overlap``. A paraphrase
    pair without a score skips the two score filters; those kept are counted in the report's
    ``notes`` as ``score_filter_skipped``. Text is written unchanged; a ``score`` column is
    passed through.
    """
    if kind not in KINDS:
        raise ValueError(f"unknown kind {kind!r}; expected one of {KINDS}")
    n_rows, src_lang, tgt_lang, has_score = pair_file_info(input)
    progress = Progress(f"{kind} filters", n_rows)
    if kind == "paraphrase" and not has_score:
        raise ValueError(
            f"{input}: kind='paraphrase' filters on the paraphrase score, but the pair file "
            "has no score column; import ParaNMT with its third (score) field"
        )
    verdicts = _bitext_verdicts if kind == "bitext" else _paraphrase_verdicts
    report = StageReport(f"filter_{kind}")
    with PairWriter.like(input, output) as writer:
        for batch in iter_pair_batches(input, batch_size):
            report.n_in += batch.num_rows
            progress.update(batch.num_rows)
            dropped = np.zeros(batch.num_rows, dtype=bool)
            for reason, failed in verdicts(batch, config):
                report.drop(reason, int((failed & ~dropped).sum()))
                dropped |= failed
            writer.write_batch(batch.filter(pa.array(~dropped)))
            report.n_out += int((~dropped).sum())
            if kind == "paraphrase":
                report.note("score_filter_skipped", int((~dropped & _unscored(batch)).sum()))
    return report.finish()


def _unscored(batch: pa.RecordBatch) -> np.ndarray:
    """Which pairs have no score (null, or NaN)."""
    return np.isnan(batch.column("score").to_numpy(zero_copy_only=False).astype(np.float64))
