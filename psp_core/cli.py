"""The ``psp`` command line: embed, score, train, models, serve, info, export, evaluate, mine,
fetch-eval-data."""

from __future__ import annotations

import argparse
import json
import logging
import os
import shutil
import signal
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import MISSING, fields
from itertools import islice
from pathlib import Path
from signal import SIGHUP, SIGINT, SIGTERM

from tqdm import tqdm

from psp_core.bundle import BundleError, check_bundle_output
from psp_core.cli_args import positive_int
from psp_core.cli_models import add_models_parser
from psp_core.corpus_files import (
    DEFAULT_TEXT_FIELD,
    INPUT_FORMATS,
    Corpus,
    guess_input_format,
    read_lines,
)
from psp_core.download import DownloadError
from psp_core.embed_workers import MIN_SENTENCES_PER_WORKER
from psp_core.fresh_memory import page_aligned_float32
from psp_core.model import EMBED_BATCH_SIZE, load_model
from psp_core.output_dirs import work_directory_beside
from psp_core.output_files import (
    OutputError,
    check_output_directory,
    check_output_file,
    replaced_when_done,
    write_error,
)
from psp_core.serving.command import add_serve_parser
from psp_core.tokenizer import PRETOKENIZERS
from psp_core.training import CheckpointWriteError, NonFiniteLossError, TrainConfig, train
from psp_core.training.checkpoint import check_checkpoint_directory
from psp_core.training.trainer import default_checkpoint_dir
from psp_core.training_file import TrainingFileError
from psp_core.vector_writers import WriteBehind, is_parquet_output, open_vector_writer

log = logging.getLogger("psp")

CHUNK_LINES = 100_000
#: lines ``psp embed`` embeds per call (a progress bar step): small enough to show progress,
#: large enough that a call's fixed costs do not count
EMBED_CHUNK = 16_384


class CliError(Exception):
    """A user error: printed as ``psp: error: ...`` with exit code 2."""


def _require_file(path: Path, what: str) -> Path:
    if not path.exists():
        raise CliError(f"{what} {path} does not exist")
    if not path.is_file():
        raise CliError(f"{what} {path} is not a file")
    return path


def read_pairs(path: Path) -> Iterator[tuple[str, str]]:
    for number, text in read_lines(path):
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


def cmd_embed(args: argparse.Namespace) -> None:
    from_stdin = args.sentence_file == "-"
    source = None if from_stdin else _require_file(Path(args.sentence_file), "sentence file")
    output = check_output_file(args.output_file, inputs=(source, args.model))
    input_format = args.input_format or ("text" if from_stdin else guess_input_format(source))
    _check_corpus_arguments(args, input_format, output)

    def corpus_at(path: Path, name: str) -> Corpus:
        field = args.field or DEFAULT_TEXT_FIELD
        return Corpus(path, input_format, name, field=field, id_field=args.id_field)

    corpus = None if from_stdin else corpus_at(source, str(source))  # its errors come first
    model = load_model(
        args.model,
        num_threads=args.threads,
        dtype=args.dtype,
        device=args.device,
        workers=args.workers,
    )
    dim = _checked_dim(args.dim, model)
    if not from_stdin:
        _embed_corpus(model, corpus, output, dim, args)
        return
    # standard input is read once into a work folder beside the output (the array's header
    # needs the count first), never into memory; removed when done, or by the next run
    with work_directory_beside(output) as work:
        spooled = work / "standard-input"
        with open(spooled, "wb") as handle:
            shutil.copyfileobj(sys.stdin.buffer, handle, 1 << 20)
        _embed_corpus(model, corpus_at(spooled, "standard input"), output, dim, args)


def _check_corpus_arguments(args: argparse.Namespace, input_format: str, output: Path) -> None:
    if input_format == "text" and (args.field or args.id_field):
        option = "--field" if args.field else "--id-field"
        raise CliError(
            f"{option} names a field of JSON Lines or Parquet input; this input is read as "
            "text, one sentence per line (name its format with --input-format)"
        )
    if args.id_field and not is_parquet_output(output):
        raise CliError(
            "--id-field copies ids into a Parquet output: give an --output-file ending in .parquet"
        )


def _embed_corpus(model, corpus: Corpus, output: Path, dim: int, args) -> None:
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
    # (with workers, chunks big enough for a share each: psp_core/embed_workers.py)
    chunk = EMBED_CHUNK if model.workers == 1 else 2 * model.workers * MIN_SENTENCES_PER_WORKER
    # (page-aligned, so that an .npy output is written past the page cache: direct_writes.py)
    buffers = [page_aligned_float32((min(count, chunk), model.dim)) for _ in "ab"]
    with replaced_when_done(output) as handle, progress:
        writer = open_vector_writer(handle, output, count, dim, args.id_field)
        with writer, WriteBehind(writer) as behind:
            for index, batch in enumerate(corpus.batches(chunk)):
                vectors = model.embed(
                    batch.texts,
                    batch_size=args.batch_size,
                    normalize=args.normalize,
                    dim=args.dim,
                    out=buffers[index % 2][: len(batch.texts)],
                )
                behind.write(vectors, batch.ids)
                progress.update(len(batch.texts))
            behind.close()
    seconds = time.perf_counter() - started
    log.info(
        "wrote %d x %d embeddings to %s in %.1f s (%.0f sentences/s from the model loaded to "
        "the output on disk)",
        count,
        dim,
        output,
        seconds,
        count / max(seconds, 1e-9),
    )


def _checked_dim(dim: int | None, model) -> int:
    if dim is None:
        return model.dim
    if not 1 <= dim <= model.dim:
        raise CliError(f"--dim must be in [1, {model.dim}] for this model, got {dim}")
    return dim


def _write_scores(handle, model, source: Path, batch_size: int, dim: int | None) -> None:
    for chunk in _chunks(read_pairs(source), CHUNK_LINES):
        scores = model.score(chunk, batch_size=batch_size, dim=dim)
        handle.writelines(
            f"{first}\t{second}\t{score:.6f}\n"
            for (first, second), score in zip(chunk, scores, strict=True)
        )


def cmd_score(args: argparse.Namespace) -> None:
    source = _require_file(Path(args.sentence_pair_file), "sentence pair file")
    inputs = (source, args.model)
    output = check_output_file(args.output_file, inputs=inputs) if args.output_file else None
    model = load_model(args.model, num_threads=args.threads, dtype=args.dtype, device=args.device)
    _checked_dim(args.dim, model)
    if output:
        with replaced_when_done(output, "w") as handle:
            _write_scores(handle, model, source, args.batch_size, args.dim)
        return
    try:
        _write_scores(sys.stdout, model, source, args.batch_size, args.dim)
        sys.stdout.flush()
    except OSError as error:
        if isinstance(error, BrokenPipeError) or error.filename is not None:
            raise
        _abandon_stdout()
        raise write_error("standard output", error) from error


def _abandon_stdout() -> None:
    """Point standard output at /dev/null, so that the interpreter's last flush of what could
    not be written does not fail again at exit (the recipe of Python's ``signal`` docs)."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)


def cmd_train(args: argparse.Namespace) -> None:
    _require_file(Path(args.data), "training file")
    _require_file(Path(args.spm), "sentencepiece model")
    if args.dev_sts:
        _require_file(Path(args.dev_sts), "dev STS file")
    if args.max_length < 0:
        raise CliError(f"--max-length must be 0 (no limit) or positive, got {args.max_length}")
    inputs = (args.data, args.spm, args.dev_sts)
    output = check_bundle_output(
        args.output, overwrite=args.overwrite, inputs=inputs, what="output bundle directory"
    )
    checkpoint_dir = Path(args.checkpoint_dir or default_checkpoint_dir(output))
    check_checkpoint_directory(checkpoint_dir, overwrite=args.overwrite, inputs=(*inputs, output))
    config = TrainConfig(**{name: getattr(args, name) for name in _train_config_fields()})
    evaluator = None
    if args.dev_sts:
        from psp_core.evaluation import StsEvaluator

        evaluator = StsEvaluator(Path(args.dev_sts))
    result = train(
        args.data,
        args.spm,
        args.output,
        config,
        dev_evaluator=evaluator,
        checkpoint_dir=args.checkpoint_dir,
        resume=not args.no_resume,
        keep_checkpoint=args.keep_checkpoint,
        pretokenizer=args.pretokenizer,
        lowercase=not args.no_lowercase,
        max_length=args.max_length,
        overwrite=args.overwrite,
    )
    if result.rank == 0:  # under torchrun, only rank 0 reports
        print(json.dumps({"bundle": str(result.bundle), "history": result.state.history}, indent=2))


def cmd_export(args: argparse.Namespace) -> None:
    from psp_core.export import export_model

    try:
        output = export_model(args.model, args.format, args.output, overwrite=args.overwrite)
    except ImportError as error:
        raise CliError(str(error)) from error
    print(f"exported {args.model} as {args.format} to {output}")


def cmd_info(args: argparse.Namespace) -> None:
    model = load_model(args.model)  # verifies the recorded checksums, when there are any
    config = model.config
    summary = {
        "path": str(Path(args.model).resolve()),
        "dim": model.dim,
        "vocab_size": model.vocab_size,
        "languages": config.languages,
        "lowercase": config.lowercase,
        "pretokenizer": config.pretokenizer,
        "max_length": config.max_length,
        "spm_sha256": config.spm_sha256,
        "format_version": config.format_version,
        "checksums_verified": bool(config.files),
        "files": config.files,
        "training": {k: v for k, v in config.training.items() if k != "history"},
    }
    print(json.dumps(summary, indent=2))


def cmd_evaluate(args: argparse.Namespace) -> None:
    from psp_core.evaluation import SUITES, evaluate_model
    from psp_core.evaluation.runner import suites_with_data

    eval_dir = Path(args.eval_dir)
    if not eval_dir.is_dir():
        raise CliError(f"evaluation directory {eval_dir} does not exist or is not a directory")
    suites = [s.strip() for s in args.suites.split(",") if s.strip()]
    unknown = [s for s in suites if s not in SUITES]
    if unknown or not suites:
        raise CliError(f"--suites {args.suites!r}: expected a comma-separated subset of {SUITES}")
    if not suites_with_data(eval_dir, suites):
        raise _nothing_to_evaluate(eval_dir, suites)
    inputs = (eval_dir, args.model)
    output = (
        check_output_file(args.output_json, "--output-json", inputs=inputs)
        if args.output_json
        else None
    )
    languages = args.tatoeba_languages.split(",") if args.tatoeba_languages else None
    model = load_model(args.model, num_threads=args.threads)
    results = evaluate_model(
        model,
        eval_dir,
        suites,
        tatoeba_languages=languages,
        speed_repeats=args.speed_repeats,
        model_name=str(args.model),
        dev_sts=args.dev_sts,
    )
    if not (results.sts or results.sts17 or results.stsb or results.tatoeba or results.speed):
        raise _nothing_to_evaluate(eval_dir, suites)
    sys.stdout.write(results.to_markdown())
    if output:
        with replaced_when_done(output, "w") as handle:
            handle.write(json.dumps(results.to_dict(), indent=2) + "\n")
        log.info("wrote %s", output)


def _nothing_to_evaluate(eval_dir: Path, suites: list[str]) -> CliError:
    return CliError(
        f"nothing to evaluate in {eval_dir} for suites {','.join(suites)}: expected "
        "sts/YEAR/NAME.tsv, sts17/PAIR.tsv, stsb/{train,dev,test}.tsv (gold<TAB>s1<TAB>s2) "
        "or tatoeba/xxx-eng.xxx + tatoeba/xxx-eng.eng (psp fetch-eval-data builds them)"
    )


def cmd_mine(args: argparse.Namespace) -> None:
    from psp_core.bitext_mining import mine_files

    source = _require_file(Path(args.source_file), "source file")
    target = _require_file(Path(args.target_file), "target file")
    if args.k < 1:
        raise CliError(f"--k must be >= 1, got {args.k}")
    check_output_file(args.output_file, inputs=(source, target, args.model))
    model = load_model(args.model, num_threads=args.threads)
    report = mine_files(
        model,
        source,
        target,
        args.output_file,
        k=args.k,
        mode=args.mode,
        threshold=args.threshold,
        batch_size=args.batch_size,
        block_size=args.block_size,
        backend=args.backend,
    )
    log.info(
        "%d pairs from %d source and %d target sentences -> %s",
        report.pairs_written,
        report.source_sentences,
        report.target_sentences,
        report.output,
    )


def cmd_fetch_eval_data(args: argparse.Namespace) -> None:
    from psp_core.evaluation.data import DEFAULT_EVAL_SOURCES, EvalSource, prepare_eval_data

    sources = dict(DEFAULT_EVAL_SOURCES)
    if args.sources_json:
        path = _require_file(Path(args.sources_json), "sources file")
        try:
            table = json.loads(path.read_text(encoding="utf-8"))
            sources = {name: EvalSource(**entry) for name, entry in table.items()}
        except (json.JSONDecodeError, TypeError, AttributeError) as error:
            raise CliError(
                f"{path}: expected a JSON object {{file name: {{url, format[, sha256]}}}} ({error})"
            ) from error
    check_output_directory(args.dest, "evaluation directory")
    formats = args.formats.split(",") if args.formats else None
    written = prepare_eval_data(args.dest, sources=sources, formats=formats)
    print(json.dumps({"written": written}, indent=2))


def _int_tuple(text: str) -> tuple[int, ...]:
    """``512,256,64`` -> ``(512, 256, 64)``."""
    try:
        return tuple(int(part) for part in text.split(",") if part.strip())
    except ValueError:
        message = f"expected integers separated by commas, got {text!r}"
        raise argparse.ArgumentTypeError(message) from None


_TYPES = {
    "int": int,
    "float": float,
    "str": str,
    "int | None": int,
    "str | None": str,
    "tuple[int, ...] | None": _int_tuple,
}


def _train_config_fields():
    return [f.name for f in fields(TrainConfig)]


def _add_train_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--data", required=True, help="training HDF5")
    parser.add_argument(
        "--spm", required=True, help="sentencepiece model the data was encoded with"
    )
    parser.add_argument(
        "--output",
        required=True,
        help="model bundle directory to write (an earlier bundle there is replaced; a folder of "
        "other files is refused unless --overwrite)",
    )
    parser.add_argument(
        "--overwrite",
        action="store_true",
        help="replace --output (and use --checkpoint-dir) even if it is a folder of other files",
    )
    parser.add_argument("--dev-sts", help="STS file (gold<TAB>s1<TAB>s2) for model selection")
    parser.add_argument("--checkpoint-dir", help="default: <output>.checkpoint")
    parser.add_argument("--no-resume", action="store_true", help="ignore an existing checkpoint")
    parser.add_argument("--keep-checkpoint", action="store_true")
    parser.add_argument("--pretokenizer", choices=PRETOKENIZERS, default=None)
    parser.add_argument("--no-lowercase", action="store_true")
    parser.add_argument("--max-length", type=int, default=100)
    group = parser.add_argument_group("hyperparameters (defaults: the paper's)")
    for field in fields(TrainConfig):
        default = field.default if field.default is not MISSING else None
        group.add_argument(
            "--" + field.name.replace("_", "-"),
            dest=field.name,
            type=_TYPES[field.type],
            default=default,
            help=f"default: {default}",
        )


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="psp", description="P-SP sentence embeddings")
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    commands = parser.add_subparsers(dest="command", required=True)

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
    embed.add_argument("--model", required=True, help="model bundle directory")
    embed.add_argument(
        "--output-file",
        required=True,
        help="a .npy file (float32 [n, dim]), or .parquet (an id column and 'embedding')",
    )
    embed.add_argument("--batch-size", type=int, default=EMBED_BATCH_SIZE)
    embed.add_argument("--normalize", action="store_true", help="unit-length vectors")
    embed.add_argument(
        "--device",
        default="auto",
        help="where the averaging runs: auto (cuda when present), cpu, cuda, cuda:1, ...",
    )
    embed.add_argument(
        "--dtype",
        choices=["float32", "float16"],
        default="float32",
        help="the embedding table in memory: float16 halves it and averages faster",
    )
    embed.add_argument(
        "--dim",
        type=int,
        help="keep the first DIM dimensions (a model trained with --matryoshka-dims)",
    )
    embed.add_argument("--threads", type=int, default=1, help="tokenizer threads")
    embed.add_argument(
        "--workers",
        type=positive_int,
        default=1,
        help="processes embedding each chunk together, one core each (Linux). On 1M lines at "
        "--dim 64 (247,325 distinct sentences, then the same again), 2 workers ran 1.2x one on "
        "2 cores; on a first pass at dim 1024 the write of the vectors needs the second core "
        "and 2 were not faster (docs/cli.md)",
    )
    embed.set_defaults(handler=cmd_embed)

    score = commands.add_parser("score", help="cosine similarity of s1<TAB>s2 lines")
    score.add_argument("--sentence-pair-file", required=True)
    score.add_argument("--model", required=True)
    score.add_argument("--output-file", help="default: standard output")
    score.add_argument("--batch-size", type=int, default=EMBED_BATCH_SIZE)
    score.add_argument("--threads", type=int, default=1)
    score.add_argument(
        "--device",
        default="auto",
        help="where the averaging runs: auto (cuda when present), cpu, cuda, cuda:1, ...",
    )
    score.add_argument(
        "--dtype",
        choices=["float32", "float16"],
        default="float32",
        help="the embedding table in memory: float16 halves it and averages faster",
    )
    score.add_argument(
        "--dim",
        type=int,
        help="keep the first DIM dimensions (a model trained with --matryoshka-dims)",
    )
    score.set_defaults(handler=cmd_score)

    train_parser = commands.add_parser("train", help="train a model on a training HDF5")
    _add_train_arguments(train_parser)
    train_parser.set_defaults(handler=cmd_train)

    add_models_parser(commands)
    add_serve_parser(commands)

    info = commands.add_parser("info", help="describe a model bundle")
    info.add_argument("model")
    info.set_defaults(handler=cmd_info)

    export = commands.add_parser(
        "export", help="write a bundle as a sentence-transformers or model2vec model folder"
    )
    export.add_argument("--model", required=True, help="model bundle directory")
    export.add_argument("--format", required=True, choices=["sentence-transformers", "model2vec"])
    export.add_argument(
        "--output",
        required=True,
        help="folder to write (an earlier export there is replaced; a folder of other files is "
        "refused unless --overwrite)",
    )
    export.add_argument(
        "--overwrite",
        action="store_true",
        help="replace --output even if it is a folder of other files",
    )
    export.set_defaults(handler=cmd_export)

    evaluate = commands.add_parser(
        "evaluate", help="STS, STS 2017, STS Benchmark, Tatoeba and speed, beside the paper"
    )
    evaluate.add_argument("--model", required=True)
    evaluate.add_argument(
        "--eval-dir", required=True, help="sts/YEAR/*.tsv, sts17/, stsb/, tatoeba/ (see README)"
    )
    evaluate.add_argument("--suites", default="sts,sts17,stsb,tatoeba,speed")
    evaluate.add_argument("--output-json", help="also write the results as JSON here")
    evaluate.add_argument(
        "--tatoeba-languages", help="comma-separated LASER codes (default: all present)"
    )
    evaluate.add_argument(
        "--dev-sts",
        help="the STS file the model was selected on (psp train --dev-sts), relative to "
        "--eval-dir or a path into it: marked dev and left out of every mean",
    )
    evaluate.add_argument("--speed-repeats", type=int, default=3)
    evaluate.add_argument("--threads", type=int, default=1, help="tokenizer threads")
    evaluate.set_defaults(handler=cmd_evaluate)

    mine = commands.add_parser(
        "mine", help="find translation pairs between two monolingual files (ratio margin)"
    )
    mine.add_argument("--model", required=True)
    mine.add_argument("--source-file", required=True, help="one sentence per line")
    mine.add_argument("--target-file", required=True, help="one sentence per line")
    mine.add_argument("--output-file", required=True, help="TSV score<TAB>source<TAB>target")
    mine.add_argument(
        "--mode", choices=["forward", "backward", "intersection"], default="intersection"
    )
    mine.add_argument("--k", type=int, default=4, help="neighbourhood size of the margin")
    mine.add_argument("--threshold", type=float, default=None, help="keep scores >= this")
    mine.add_argument("--backend", choices=["auto", "torch", "faiss"], default="auto")
    mine.add_argument("--block-size", type=int, default=4096, help="rows per search block")
    mine.add_argument("--batch-size", type=int, default=64)
    mine.add_argument("--threads", type=int, default=1, help="tokenizer threads")
    mine.set_defaults(handler=cmd_mine)

    fetch = commands.add_parser(
        "fetch-eval-data", help="download and convert the official evaluation sets"
    )
    fetch.add_argument("--dest", required=True, help="evaluation directory to fill")
    fetch.add_argument("--formats", help="e.g. sts2012,sts17-input,sts17-gold,stsb,tatoeba")
    fetch.add_argument("--sources-json", help="{file name: {url, format[, sha256]}} (mirrors)")
    fetch.set_defaults(handler=cmd_fetch_eval_data)
    return parser


class Terminated(BaseException):
    """SIGTERM or SIGHUP, raised where Python code runs so that every temporary is removed on
    the way out (``kill`` without ``-9``, a closed terminal, a job scheduler's stop)."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


def _raise_terminated(signum: int, frame) -> None:
    raise Terminated(signum)


@contextmanager
def _signals_raise():
    """SIGTERM and SIGHUP raise :class:`Terminated` in the main thread while the block runs."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {sig: signal.signal(sig, _raise_terminated) for sig in (SIGTERM, SIGHUP)}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    try:
        with _signals_raise():
            args.handler(args)
    except BrokenPipeError:
        # whoever read our standard output stopped (psp score ... | head): stop quietly
        _abandon_stdout()
        return 1
    except KeyboardInterrupt:
        print("psp: interrupted (Ctrl-C)", file=sys.stderr)
        return 128 + SIGINT  # 130, as shells report Ctrl-C
    except Terminated as stop:
        name = signal.Signals(stop.signum).name
        print(f"psp: stopped by {name}", file=sys.stderr)
        return 128 + stop.signum
    except (
        CliError,
        OutputError,
        BundleError,
        TrainingFileError,
        NonFiniteLossError,
        CheckpointWriteError,
        OSError,
        DownloadError,
        ValueError,
    ) as error:
        print(f"psp: error: {_one_line(error)}", file=sys.stderr)
        return 2
    return 0


def _one_line(error: Exception) -> str:
    """``PATH: reason`` for an OSError of the standard library (``[Errno 13] ...: 'PATH'``);
    our own errors already say what they mean."""
    plain = isinstance(error, OSError) and type(error).__str__ is OSError.__str__
    if plain and error.filename is not None and error.strerror:
        names = f"{error.filename} -> {error.filename2}" if error.filename2 else error.filename
        return f"{names}: {error.strerror}"
    return str(error)


if __name__ == "__main__":
    sys.exit(main())
