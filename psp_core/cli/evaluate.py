"""``psp evaluate`` (the registered evaluation suites: :mod:`psp_core.evaluation.suite`) and
``psp fetch-eval-data`` (their official sets, downloaded and converted)."""

from __future__ import annotations

import argparse
import json
import logging
import sys
from pathlib import Path

from psp_core.cli.errors import CliError, require_file
from psp_core.extras import require
from psp_core.files.output_files import (
    check_output_directory,
    check_output_file,
    replaced_when_done,
)
from psp_core.files.output_targets import STANDARD_OUTPUT
from psp_core.inference.model import load_model
from psp_core.models.hub import MODEL_HELP

log = logging.getLogger("psp")


def add_evaluate_parser(commands) -> None:
    from psp_core.evaluation.registry import registered

    suites = registered()
    titles = [each.title for each in suites.values()]
    evaluate = commands.add_parser(
        "evaluate", help=f"{', '.join(titles[:-1])} and {titles[-1]}, beside the paper"
    )
    evaluate.add_argument("--model", required=True, help=MODEL_HELP)
    evaluate.add_argument(
        "--eval-dir",
        required=True,
        help=", ".join(dict.fromkeys(p for each in suites.values() for p in each.files))
        + " (docs/evaluation.md)",
    )
    evaluate.add_argument(
        "--suites",
        default=",".join(suites),
        help="comma-separated suites to run (default: all of them)",
    )
    evaluate.add_argument(
        "--output-json",
        help="also write the results as JSON here; - writes them to standard output (the "
        "tables then go to standard error)",
    )
    for each in suites.values():
        if each.subset_option:
            evaluate.add_argument(
                f"--{each.subset_option.replace('_', '-')}", help=each.subset_help
            )
    evaluate.add_argument(
        "--dev-sts",
        help="the STS file the model was selected on (psp train --dev-sts), relative to "
        "--eval-dir or a path into it: marked dev and left out of every mean",
    )
    evaluate.add_argument("--speed-repeats", type=int, default=3)
    evaluate.add_argument("--threads", type=int, default=1, help="tokenizer threads")
    evaluate.set_defaults(handler=cmd_evaluate)


def add_fetch_eval_data_parser(commands) -> None:
    from psp_core.evaluation.registry import registered

    fetch = commands.add_parser(
        "fetch-eval-data", help="download and convert the official evaluation sets"
    )
    fetch.add_argument("--dest", required=True, help="evaluation directory to fill")
    formats = {s.format: None for each in registered().values() for s in each.sources.values()}
    fetch.add_argument("--formats", help="comma-separated, any of " + ",".join(formats))
    fetch.add_argument("--sources-json", help="{file name: {url, format[, sha256]}} (mirrors)")
    fetch.set_defaults(handler=cmd_fetch_eval_data)


def cmd_evaluate(args: argparse.Namespace) -> None:
    require("requests", "evaluate", "psp evaluate")  # (the evaluation package downloads too)
    from psp_core.evaluation import evaluate_model, registered, suites_with_data

    eval_dir = Path(args.eval_dir)
    if not eval_dir.is_dir():
        raise CliError(f"evaluation directory {eval_dir} does not exist or is not a directory")
    known = tuple(registered())
    suites = [s.strip() for s in args.suites.split(",") if s.strip()]
    unknown = [s for s in suites if s not in known]
    if unknown or not suites:
        raise CliError(f"--suites {args.suites!r}: expected a comma-separated subset of {known}")
    if not suites_with_data(eval_dir, suites):
        raise _nothing_to_evaluate(eval_dir, suites)
    inputs = (eval_dir, args.model)
    output = (
        check_output_file(args.output_json, "--output-json", inputs=inputs)
        if args.output_json
        else None
    )
    subsets = {
        each.subset_option: getattr(args, each.subset_option).split(",")
        for each in registered().values()
        if each.subset_option and getattr(args, each.subset_option, None)
    }
    model = load_model(args.model, num_threads=args.threads)
    results = evaluate_model(
        model,
        eval_dir,
        suites,
        speed_repeats=args.speed_repeats,
        model_name=str(args.model),
        dev_sts=args.dev_sts,
        **subsets,
    )
    if not any(results.results.values()):
        raise _nothing_to_evaluate(eval_dir, suites)
    # with the JSON on standard output, the tables for people go beside the logs
    tables = sys.stderr if output and output.kind == STANDARD_OUTPUT else sys.stdout
    tables.write(results.to_markdown())
    if output:
        with replaced_when_done(output, "w") as handle:
            handle.write(json.dumps(results.to_dict(), indent=2) + "\n")
        log.info("wrote %s", output)


def _nothing_to_evaluate(eval_dir: Path, suites: list[str]) -> CliError:
    from psp_core.evaluation import registered

    layouts = [
        each.layout if each.layout is not None else " or ".join(each.files)
        for each in registered().values()
    ]
    return CliError(
        f"nothing to evaluate in {eval_dir} for suites {','.join(suites)}: expected "
        f"{', '.join(filter(None, layouts))} (psp fetch-eval-data builds them)"
    )


def cmd_fetch_eval_data(args: argparse.Namespace) -> None:
    require("requests", "evaluate", "psp fetch-eval-data")
    from psp_core.evaluation.data import EvalSource, default_eval_sources, prepare_eval_data

    sources = default_eval_sources()
    if args.sources_json:
        path = require_file(Path(args.sources_json), "sources file")
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
