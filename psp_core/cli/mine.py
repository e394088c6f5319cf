"""``psp mine``: translation pairs found between two monolingual files (ratio margin)."""

from __future__ import annotations

import argparse
import logging
from pathlib import Path

from psp_core.cli.arguments import finite_float
from psp_core.cli.errors import CliError, require_file
from psp_core.cli.notes import EmptySentences
from psp_core.extras import require
from psp_core.files.output_files import check_output_file
from psp_core.inference.model import load_model
from psp_core.models.hub import MODEL_HELP

log = logging.getLogger("psp")


def add_mine_parser(commands) -> None:
    mine = commands.add_parser(
        "mine", help="find translation pairs between two monolingual files (ratio margin)"
    )
    mine.add_argument("--model", required=True, help=MODEL_HELP)
    mine.add_argument("--source-file", required=True, help="one sentence per line")
    mine.add_argument("--target-file", required=True, help="one sentence per line")
    mine.add_argument(
        "--output-file",
        required=True,
        help="TSV score<TAB>source<TAB>target; - writes it to standard output",
    )
    mine.add_argument(
        "--mode", choices=["forward", "backward", "intersection"], default="intersection"
    )
    mine.add_argument("--k", type=int, default=4, help="neighbourhood size of the margin")
    mine.add_argument("--threshold", type=finite_float, default=None, help="keep scores >= this")
    mine.add_argument("--backend", choices=["auto", "torch", "faiss"], default="auto")
    mine.add_argument("--block-size", type=int, default=4096, help="rows per search block")
    mine.add_argument("--batch-size", type=int, default=64)
    mine.add_argument("--threads", type=int, default=1, help="tokenizer threads")
    mine.set_defaults(handler=cmd_mine)


def cmd_mine(args: argparse.Namespace) -> None:
    require("torch", "train", "psp mine")  # (its nearest-neighbour search runs on torch)
    from psp_core.bitext_mining import mine_files

    source = require_file(Path(args.source_file), "source file")
    target = require_file(Path(args.target_file), "target file")
    if args.k < 1:
        raise CliError(f"--k must be >= 1, got {args.k}")
    output = check_output_file(args.output_file, inputs=(source, target, args.model))
    model = load_model(args.model, num_threads=args.threads)
    empty = EmptySentences("lines", "their vectors are zero")
    with empty.counting(str):  # (each file's warning names the file and its line)
        report = mine_files(
            model,
            source,
            target,
            output,
            k=args.k,
            mode=args.mode,
            threshold=args.threshold,
            batch_size=args.batch_size,
            block_size=args.block_size,
            backend=args.backend,
        )
    empty.note()
    log.info(
        "%d pairs from %d source and %d target sentences -> %s",
        report.pairs_written,
        report.source_sentences,
        report.target_sentences,
        report.output,
    )
