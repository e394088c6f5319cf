"""``psp embed``: a corpus (text, JSON Lines or Parquet; a file or standard input) into a
``.npy`` array or a Parquet file, in chunks, with a progress bar on a terminal."""

from __future__ import annotations

import argparse
import logging
import os
import sys
import time
from pathlib import Path

from tqdm import tqdm

from psp_core.cli.arguments import add_model_runtime_arguments, positive_int
from psp_core.cli.corpus_files import (
    DEFAULT_MAX_CHARS,
    DEFAULT_TEXT_FIELD,
    INPUT_FORMATS,
    Corpus,
    CorpusError,
    guess_input_format,
)
from psp_core.cli.errors import CliError, require_file
from psp_core.cli.notes import EmptySentences
from psp_core.cli.vector_writers import (
    OUTPUT_FORMATS,
    IdTypeError,
    WriteBehind,
    is_parquet_output,
    open_vector_writer,
    output_format,
)
from psp_core.files.output_dirs import work_directory_beside
from psp_core.files.output_files import OutputError, check_output_file, replaced_when_done
from psp_core.files.output_targets import OutputTarget
from psp_core.inference.fast.multiprocess_embed import MIN_SENTENCES_PER_WORKER
from psp_core.inference.fast.prefaulted_arrays import page_aligned_float32
from psp_core.inference.model import EMBED_BATCH_SIZE, load_model
from psp_core.models.hub import MODEL_HELP

log = logging.getLogger("psp")

CHUNK_LINES = 100_000
#: lines ``psp embed`` embeds per call (a progress bar step): small enough to show progress,
#: large enough that a call's fixed costs do not count
EMBED_CHUNK = 16_384


def add_embed_parser(commands) -> None:
    embed = commands.add_parser(
        "embed", help="embed a corpus (text, JSON Lines or Parquet) into .npy or Parquet"
    )
    embed.add_argument(
        "--sentence-file",
        required=True,
        help="one sentence per line, JSON Lines (.jsonl) or Parquet (.parquet); - reads "
        "standard input",
    )
    embed.add_argument(
        "--input-format",
        choices=INPUT_FORMATS,
        help="default: from the file name (.jsonl/.ndjson, .parquet/.pq, else text)",
    )
    embed.add_argument(
        "--field",
        help=f"the JSON field or Parquet column with the text (default: {DEFAULT_TEXT_FIELD})",
    )
    embed.add_argument(
        "--id-field",
        help="a JSON field or Parquet column copied beside each vector in a Parquet output "
        "(default: its 0-based row)",
    )
    embed.add_argument(
        "--max-chars",
        type=positive_int,
        default=DEFAULT_MAX_CHARS,
        help="characters of a line (a JSON or Parquet text) that are embedded; a longer one is "
        "cut to them, never held whole, and the summary line counts the cuts. A JSON Lines "
        f"line too long for such a text is an error naming it (default {DEFAULT_MAX_CHARS:,}, "
        "past what a model reads: docs/cli.md)",
    )
    embed.add_argument("--model", required=True, help=MODEL_HELP)
    embed.add_argument(
        "--output-file",
        required=True,
        help="a .npy file (float32 [n, dim]), or .parquet (an id column and 'embedding'); "
        "- writes the .npy array to standard output, a device or FIFO is written into; a name "
        "with another suffix needs --output-format",
    )
    embed.add_argument(
        "--output-format",
        choices=OUTPUT_FORMATS,
        help="npy or parquet, whatever the output's name (default: from its suffix; none: npy)",
    )
    embed.add_argument("--batch-size", type=int, default=EMBED_BATCH_SIZE)
    embed.add_argument("--normalize", action="store_true", help="unit-length vectors")
    add_model_runtime_arguments(embed)
    embed.add_argument("--threads", type=int, default=1, help="tokenizer threads")
    embed.add_argument(
        "--workers",
        type=positive_int,
        default=1,
        help="processes embedding each chunk together, one core each (Linux). They pay where "
        "the embedding, not the writing of the vectors, keeps the cores busy (a small --dim); "
        "on a first pass at dim 1024 the write needs the second core "
        "(docs/cli.md)",
    )
    embed.set_defaults(handler=cmd_embed)


def cmd_embed(args: argparse.Namespace) -> None:
    from_stdin = args.sentence_file == "-"
    source = None if from_stdin else require_file(Path(args.sentence_file), "sentence file")
    output = check_output_file(args.output_file, inputs=(source, args.model))
    input_format = args.input_format or ("text" if from_stdin else guess_input_format(source))
    _check_corpus_arguments(args, input_format, output)

    def corpus_at(path: Path, name: str) -> Corpus:
        field = args.field or DEFAULT_TEXT_FIELD
        return Corpus(
            path, input_format, name, field=field, id_field=args.id_field, max_chars=args.max_chars
        )

    corpus = None if from_stdin else corpus_at(source, str(source))  # its errors come first
    model = load_model(
        args.model,
        num_threads=args.threads,
        dtype=args.dtype,
        device=args.device,
        workers=args.workers,
    )
    dim = checked_dim(args.dim, model)
    if not from_stdin:
        _embed_corpus(model, corpus, output, dim, args)
        return
    # standard input is read once into a work folder beside the output (the array's header
    # needs the count first), never into memory; removed when done, or by the next run
    with work_directory_beside(output) as work:
        spooled = spool_standard_input(work / "standard-input")
        _embed_corpus(model, corpus_at(spooled, "standard input"), output, dim, args)


def spool_standard_input(spooled: Path) -> Path:
    """Copy standard input into the new file ``spooled``; a write that fails (a full disk) is
    an :class:`OutputError` naming the spool, a read that fails names standard input."""
    try:
        fd = os.open(spooled, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
    except OSError as error:
        raise _spool_error(spooled, error) from error
    try:
        while block := _read_standard_input():
            view = memoryview(block)
            while view:  # a write may take part of the block (the disk filling up)
                view = view[os.write(fd, view) :]
    except OSError as error:
        raise _spool_error(spooled, error) from error
    finally:
        os.close(fd)
    return spooled


def _read_standard_input() -> bytes:
    try:
        return sys.stdin.buffer.read(1 << 20)
    except OSError as error:
        raise OutputError(f"cannot read standard input: {error.strerror}") from error


def _spool_error(spooled: Path, error: OSError) -> OutputError:
    reason = error.strerror or str(error)
    return OutputError(f"{reason[:1].lower()}{reason[1:]} spooling standard input to {spooled}")


def _check_corpus_arguments(
    args: argparse.Namespace, input_format: str, output: OutputTarget
) -> None:
    output_format(output, args.output_format)  # (a name psp would write the wrong bytes under)
    if input_format == "text" and (args.field or args.id_field):
        option = "--field" if args.field else "--id-field"
        raise CliError(
            f"{option} names a field of JSON Lines or Parquet input; this input is read as "
            "text, one sentence per line (name its format with --input-format)"
        )
    if args.id_field and not is_parquet_output(output, args.output_format):
        raise CliError(
            "--id-field copies ids into a Parquet output: give an --output-file ending in .parquet"
        )


def _embed_corpus(model, corpus: Corpus, output: OutputTarget, dim: int, args) -> None:
    started = time.perf_counter()
    count = corpus.count()
    progress = tqdm(
        total=count,
        unit="sent",
        disable=None if count >= CHUNK_LINES else True,  # (None: only on a terminal)
        desc="embedding",
        file=sys.stderr,
    )
    # two buffers taking turns: one is embedded into while the other is written, and fresh
    # memory is only touched once
    # (with workers, chunks big enough for a share each: psp_core/inference/fast/multiprocess_embed.py)
    chunk = EMBED_CHUNK if model.workers == 1 else 2 * model.workers * MIN_SENTENCES_PER_WORKER
    # (page-aligned, so that an .npy output is written past the page cache: direct_writes.py)
    buffers = [page_aligned_float32((min(count, chunk), model.dim)) for _ in "ab"]
    empty = EmptySentences(consequence="their vectors are zero, not unit length")
    try:
        with replaced_when_done(output) as handle, progress:
            writer = open_vector_writer(
                handle, output, count, dim, args.id_field, args.output_format
            )
            with writer, WriteBehind(writer) as behind:
                done = 0
                for index, batch in enumerate(corpus.batches(chunk)):
                    with empty.counting(lambda i, done=done: corpus.locate(done + i)):
                        vectors = model.embed(
                            batch.texts,
                            batch_size=args.batch_size,
                            normalize=args.normalize,
                            dim=args.dim,
                            out=buffers[index % 2][: len(batch.texts)],
                            max_chars=None,  # the corpus cut them to --max-chars
                        )
                    behind.write(vectors, batch.ids)
                    progress.update(len(batch.texts))
                    done += len(batch.texts)
                behind.close()
    except IdTypeError as error:  # the writer knows the vector; the corpus knows its line
        raise CorpusError(f"{corpus.locate(error.vector)}: {error.detail}") from error
    empty.note()
    seconds = time.perf_counter() - started
    log.info(
        "wrote %d x %d embeddings to %s in %.1f s (%.0f sentences/s from the model loaded to "
        "the output on disk)%s",
        count,
        dim,
        output,
        seconds,
        count / max(seconds, 1e-9),
        f"; {cut}" if (cut := corpus.truncations.summary()) else "",
    )


def checked_dim(dim: int | None, model) -> int:
    """``--dim``, checked against the model; a prefix of a model not trained for prefixes
    (``psp train --matryoshka-dims``) is noted in one line: it runs, but is no smaller model."""
    if dim is None:
        return model.dim
    if not 1 <= dim <= model.dim:
        raise CliError(f"--dim must be in [1, {model.dim}] for this model, got {dim}")
    training = model.config.training or {}
    trained = (training.get("config") or {}).get("matryoshka_dims") or []
    if dim < model.dim and dim not in trained:
        log.warning(
            "--dim %d keeps the first %d of %d dimensions of a model trained for %s: they are "
            "not a model of %d dimensions, so expect worse vectors than its full ones",
            dim,
            dim,
            model.dim,
            f"prefixes of {', '.join(map(str, trained))} only"
            if trained
            else "no prefix (psp train --matryoshka-dims)",
            dim,
        )
    return dim
