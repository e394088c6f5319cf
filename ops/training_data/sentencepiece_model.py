"""Training the shared sentencepiece model from a bounded random sample of a corpus.

The sample is drawn in one streaming pass with memory bounded by the sample itself:
:func:`reservoir_sample` (Algorithm L, skipping over the items it will not keep) for any iterable
of strings, :func:`reservoir_sample_arrays` (Algorithm R vectorized over Arrow batches: one numpy
draw per batch, only the accepted rows are converted to Python) for pair files. The sample is
written to a temporary text file and handed to sentencepiece as a file, so the Python copy is
freed before sentencepiece loads its own.
"""

from __future__ import annotations

import io
import logging
import math
import os
import random
import re
import tempfile
from collections.abc import Iterable, Iterator
from itertools import islice
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import sentencepiece as spm

from ops.pairs.pair_files import iter_pair_batches, pair_file_info
from ops.progress import Progress, heartbeat
from ops.sources.text_io import atomic_path

log = logging.getLogger(__name__)

_SAMPLE_BATCH = 131_072
# the reference code's spm_train settings (the paper: a 50k vocabulary), the defaults wherever a
# vocabulary is trained
VOCAB_SIZE = 50_000
CHARACTER_COVERAGE = 0.995
INPUT_SENTENCE_SIZE = 10_000_000


def _open_unit(rng: random.Random) -> float:
    """A uniform draw in the open interval (0, 1)."""
    while True:
        value = rng.random()
        if value > 0.0:
            return value


def reservoir_sample(items: Iterable[str], size: int, seed: int) -> list[str]:
    """A uniform random sample of at most ``size`` items, in one pass (memory: the sample).

    Algorithm L (Li, 1994): after the reservoir is full, the number of items to skip before the
    next replacement is drawn directly, so the cost is O(size * log(n / size)) random draws.
    """
    if size < 0:
        raise ValueError(f"sample size must be >= 0, got {size}")
    rng = random.Random(seed)
    iterator = iter(items)
    sample = list(islice(iterator, size))
    if len(sample) < size or size == 0:
        return sample
    weight = math.exp(math.log(_open_unit(rng)) / size)
    missing = object()
    while True:
        skip = math.floor(math.log(_open_unit(rng)) / math.log1p(-weight))
        item = next(islice(iterator, skip, None), missing)
        if item is missing:
            return sample
        sample[rng.randrange(size)] = item  # type: ignore[assignment]
        weight *= math.exp(math.log(_open_unit(rng)) / size)


def reservoir_sample_arrays(arrays: Iterable[pa.Array], size: int, seed: int) -> list[str]:
    """A uniform random sample of at most ``size`` strings from a stream of Arrow string arrays.

    Algorithm R, vectorized per array: item ``i`` (0-based over the stream) past the first
    ``size`` draws a slot ``j`` uniform in ``[0, i]`` and replaces slot ``j`` when ``j < size``;
    within one array a slot drawn twice keeps the later item, exactly as the sequential algorithm.
    """
    if size < 0:
        raise ValueError(f"sample size must be >= 0, got {size}")
    rng = np.random.default_rng(seed)
    sample = np.empty(size, dtype=object)
    filled = 0
    seen = 0
    for array in arrays:
        fill = min(len(array), size - filled)
        if fill:
            sample[filled : filled + fill] = array.slice(0, fill).to_pylist()
            filled += fill
        rest = array.slice(fill)
        if len(rest):
            positions = np.arange(seen + fill, seen + len(array), dtype=np.int64)
            slots = rng.integers(0, positions + 1)
            accepted = np.flatnonzero(slots < size)
            if accepted.size:
                # the last item drawn for a slot wins: unique over the reversed draws
                unique_slots, first_reversed = np.unique(slots[accepted][::-1], return_index=True)
                winners = accepted[::-1][first_reversed]
                sample[unique_slots] = rest.take(pa.array(winners)).to_pylist()
        seen += len(array)
    return sample[:filled].tolist()


def _pair_sentences(input: str | Path, progress: Progress | None = None) -> Iterator[pa.Array]:
    """Both sides of a pair file as Arrow string arrays, without empty or blank sentences."""
    for batch in iter_pair_batches(input, _SAMPLE_BATCH):
        for column in ("src", "tgt"):
            text = batch.column(column)
            yield text.filter(pc.not_equal(pc.utf8_trim_whitespace(text), ""))
        if progress is not None:
            progress.update(2 * batch.num_rows)


_REQUIRED_CHARS = re.compile(r"Vocabulary size is smaller than required_chars\. (\d+) vs (\d+)")


def vocabulary_for_characters(error: Exception) -> tuple[int, int] | None:
    """From sentencepiece's "Vocabulary size is smaller than required_chars. V vs C" error:
    ``(C, a vocabulary size that fits them)``, with room for the special pieces and a tenth
    more for pieces longer than one character; None for any other error."""
    found = _REQUIRED_CHARS.search(str(error))
    if found is None:
        return None
    characters = int(found.group(2))
    return characters, characters + max(characters // 10, 16)


def _train_on_sample(
    sample: list[str],
    output: str | Path,
    *,
    vocab_size: int,
    character_coverage: float,
    model_type: str,
    num_threads: int,
    byte_fallback: bool = False,
) -> Path:
    """Write ``sample`` to a temporary file (freeing it), train, write the model atomically."""
    output = Path(output)
    output.parent.mkdir(parents=True, exist_ok=True)
    n_sentences = len(sample)
    # named like every temporary (``.tmp-<pid>``), so a run killed here leaves nothing that the
    # next run's stale-temp sweep does not remove
    with tempfile.TemporaryDirectory(
        prefix="spm-", suffix=f".tmp-{os.getpid()}", dir=output.parent
    ) as tmp_dir:
        text_path = Path(tmp_dir) / "sample.txt"
        with open(text_path, "w", encoding="utf-8", newline="\n") as handle:
            for start in range(0, len(sample), 65_536):
                chunk = sample[start : start + 65_536]
                handle.write("\n".join(s.replace("\n", " ") for s in chunk))
                handle.write("\n")
        sample.clear()
        log.info("training sentencepiece (vocab %d) on %d sentences", vocab_size, n_sentences)
        model = io.BytesIO()

        # fed as an iterator over the file rather than as ``input=path``: the model then
        # records no input path (a temporary name), so the same sample gives the same bytes
        def train(size: int) -> None:
            with open(text_path, encoding="utf-8", newline="\n") as lines:
                spm.SentencePieceTrainer.train(
                    sentence_iterator=(line[:-1] for line in lines),
                    model_writer=model,
                    vocab_size=size,
                    character_coverage=character_coverage,
                    model_type=model_type,
                    hard_vocab_limit=False,
                    byte_fallback=byte_fallback,
                    num_threads=num_threads,
                    minloglevel=2,
                )

        describe = f"sentencepiece: training vocab {vocab_size} on {n_sentences:,} sentences"
        try:
            with heartbeat(lambda: describe):
                train(vocab_size)
        except RuntimeError as error:
            needed = vocabulary_for_characters(error)
            if needed is None:
                raise
            log.warning(
                "vocab_size %d is smaller than the %d characters that character_coverage %s "
                "keeps in this sample need (a script with many characters, such as Chinese): "
                "training with vocab_size %d instead",
                vocab_size,
                needed[0],
                character_coverage,
                needed[1],
            )
            model = io.BytesIO()
            describe = f"sentencepiece: training vocab {needed[1]} on {n_sentences:,} sentences"
            with heartbeat(lambda: describe):
                train(needed[1])
    with atomic_path(output) as tmp:
        tmp.write_bytes(model.getvalue())
    return output


def train_sentencepiece(
    sentences: Iterable[str],
    output: str | Path,
    *,
    vocab_size: int = VOCAB_SIZE,
    character_coverage: float = CHARACTER_COVERAGE,
    input_sentence_size: int = INPUT_SENTENCE_SIZE,
    model_type: str = "unigram",
    seed: int = 1,
    num_threads: int = 2,
    byte_fallback: bool = False,
) -> Path:
    """Train a sentencepiece model (by default the reference code's ``spm_train`` settings in
    ``preprocess_data.py``: unigram, vocab 50,000, coverage 0.995, a 10M-sentence sample) and
    write it atomically.

    ``sentences`` is streamed once; at most ``input_sentence_size`` of them, drawn uniformly,
    are kept for training. ``hard_vocab_limit`` is off, so a small corpus gets a smaller
    vocabulary instead of an error.
    """
    sample = [s for s in reservoir_sample(sentences, input_sentence_size, seed) if s.strip()]
    if not sample:
        raise ValueError("no non-empty sentences to train sentencepiece on")
    return _train_on_sample(
        sample,
        output,
        vocab_size=vocab_size,
        character_coverage=character_coverage,
        model_type=model_type,
        num_threads=num_threads,
        byte_fallback=byte_fallback,
    )


def train_sentencepiece_from_pairs(
    input: str | Path,
    output: str | Path,
    *,
    vocab_size: int = VOCAB_SIZE,
    character_coverage: float = CHARACTER_COVERAGE,
    input_sentence_size: int = INPUT_SENTENCE_SIZE,
    model_type: str = "unigram",
    seed: int = 1,
    num_threads: int = 2,
    byte_fallback: bool = False,
) -> Path:
    """Train the shared vocabulary on both sides of the pair file ``input``.

    The text is used as it is: it was lowercased by dedup upstream (and jieba-segmented for
    Chinese), exactly what the tokenizer feeds sentencepiece at encoding time. At most
    ``input_sentence_size`` non-blank sentences, drawn uniformly from both sides while streaming,
    are used, so the training cost is bounded by that number rather than by the corpus size.
    """
    n_pairs = pair_file_info(input)[0]
    progress = Progress("sentencepiece sample", 2 * n_pairs, unit="sentences")
    sentences = _pair_sentences(input, progress)
    sample = reservoir_sample_arrays(sentences, input_sentence_size, seed)
    if not sample:
        raise ValueError(
            f"{input}: no non-empty sentences to train sentencepiece on ({n_pairs} pairs); "
            "check the earlier stages' reports"
        )
    return _train_on_sample(
        sample,
        output,
        vocab_size=vocab_size,
        character_coverage=character_coverage,
        model_type=model_type,
        num_threads=num_threads,
        byte_fallback=byte_fallback,
    )
