"""``psp score``: the cosine similarity of each ``sentence1<TAB>sentence2`` line."""

from __future__ import annotations

import argparse
from collections.abc import Iterator
from itertools import islice
from pathlib import Path

from psp_core.cli.arguments import add_model_runtime_arguments, positive_int
from psp_core.cli.corpus_files import DEFAULT_MAX_CHARS, read_lines
from psp_core.cli.embed import CHUNK_LINES, checked_dim
from psp_core.cli.errors import CliError, require_file
from psp_core.cli.notes import EmptySentences
from psp_core.files.output_files import check_output_file, replaced_when_done
from psp_core.inference.model import EMBED_BATCH_SIZE, load_model
from psp_core.models.hub import MODEL_HELP


def add_score_parser(commands) -> None:
    score = commands.add_parser("score", help="cosine similarity of s1<TAB>s2 lines")
    score.add_argument("--sentence-pair-file", required=True)
    score.add_argument("--model", required=True, help=MODEL_HELP)
    score.add_argument(
        "--output-file",
        default="-",
        help="default (and -): standard output; a device or FIFO is written into",
    )
    score.add_argument(
        "--max-chars",
        type=positive_int,
        default=DEFAULT_MAX_CHARS,
        help="characters of a sentence that are embedded (a longer one is scored from them); a "
        "line longer than two such sentences and a tab is an error naming it, never held whole "
        f"(default {DEFAULT_MAX_CHARS:,}, past what a model reads: docs/cli.md)",
    )
    score.add_argument("--batch-size", type=int, default=EMBED_BATCH_SIZE)
    score.add_argument("--threads", type=int, default=1)
    add_model_runtime_arguments(score)
    score.set_defaults(handler=cmd_score)


def read_pairs(path: Path, max_chars: int | None = None) -> Iterator[tuple[str, str]]:
    """The ``sentence1<TAB>sentence2`` pairs of ``path``; with ``max_chars``, a line longer
    than two sentences of ``max_chars`` characters and their tab is an error naming it, found
    without holding the line whole."""

    def too_long(number: int) -> None:
        raise CliError(
            f"{path}:{number}: longer than {line_chars:,} characters (two sentences of "
            f"--max-chars {max_chars:,} and a tab); shorten the line or raise --max-chars"
        )

    line_chars = None if max_chars is None else 2 * max_chars + 1
    for number, text in read_lines(path, max_chars=line_chars, on_cut=too_long):
        fields_ = text.split("\t")
        if len(fields_) < 2:
            raise CliError(f"{path}:{number}: no tab; expected sentence1<TAB>sentence2")
        if len(fields_) > 2:
            raise CliError(
                f"{path}:{number}: {len(fields_)} tab-separated fields; expected exactly two "
                "(sentence1<TAB>sentence2)"
            )
        yield fields_[0], fields_[1]


def _chunks(iterator, size):
    while chunk := list(islice(iterator, size)):
        yield chunk


def _write_scores(handle, model, source: Path, args: argparse.Namespace) -> None:
    empty = EmptySentences("pairs", "one side's vector is zero, and their score 0")
    done = 0  # (each line one pair: pair i is line i + 1)
    for chunk in _chunks(read_pairs(source, args.max_chars), CHUNK_LINES):
        cut = [(first[: args.max_chars], second[: args.max_chars]) for first, second in chunk]
        with empty.counting(lambda i, done=done: f"{source}:{done + i + 1}"):
            scores = model.score(cut, batch_size=args.batch_size, dim=args.dim)
        handle.writelines(
            f"{first}\t{second}\t{score:.6f}\n"
            for (first, second), score in zip(chunk, scores, strict=True)
        )
        done += len(chunk)
    empty.note()


def cmd_score(args: argparse.Namespace) -> None:
    source = require_file(Path(args.sentence_pair_file), "sentence pair file")
    output = check_output_file(args.output_file, inputs=(source, args.model))
    model = load_model(args.model, num_threads=args.threads, dtype=args.dtype, device=args.device)
    checked_dim(args.dim, model)
    # streamed as it is computed: a file is renamed into place at the end, standard output, a
    # device or a FIFO receive each chunk as it is scored
    with replaced_when_done(output, "w") as handle:
        _write_scores(handle, model, source, args)
