"""``psp info`` (what a bundle holds, its checksums verified) and ``psp export`` (a bundle as a
sentence-transformers or model2vec folder)."""

from __future__ import annotations

import argparse
import json

from psp_core.cli.errors import CliError
from psp_core.inference.fast.pooling import backend, describe
from psp_core.inference.model import load_model
from psp_core.models.hub import MODEL_HELP, is_hub_id, model_folder


def add_info_parser(commands) -> None:
    info = commands.add_parser("info", help="describe a model bundle")
    info.add_argument("model", help=MODEL_HELP)
    info.set_defaults(handler=cmd_info)


def add_export_parser(commands) -> None:
    export = commands.add_parser(
        "export", help="write a bundle as a sentence-transformers or model2vec model folder"
    )
    export.add_argument("--model", required=True, help=MODEL_HELP)
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


def cmd_info(args: argparse.Namespace) -> None:
    folder = model_folder(args.model)  # (a Hub model: fetched, or found in the cache)
    model = load_model(folder)  # verifies the recorded checksums, when there are any
    config = model.config
    summary = {
        **({"hub_id": args.model} if is_hub_id(args.model) else {}),
        "path": str(folder.resolve()),
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
        # how embed averages here, on one thread (psp embed's way): whether the compiled loop
        # was built at install shows here
        "sentence_sums": describe(backend()),
    }
    print(json.dumps(summary, indent=2))


def cmd_export(args: argparse.Namespace) -> None:
    from psp_core.models.export import export_model

    try:
        output = export_model(args.model, args.format, args.output, overwrite=args.overwrite)
    except ImportError as error:
        raise CliError(str(error)) from error
    print(f"exported {args.model} as {args.format} to {output}")
