"""``psp serve``: the arguments and the handler of the command."""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from psp_core.cli.arguments import port_number, positive_int
from psp_core.extras import require
from psp_core.models.registry import NO_STORAGE_ROOT, STORAGE_ENV, STORAGE_ROOT_HELP, storage_root
from psp_core.serving.limits import Limits

WORKERS_ENV = "PSP_SERVE_WORKERS"


def add_serve_parser(commands) -> None:
    serve = commands.add_parser(
        "serve",
        help="the OpenAI embeddings API (POST /v1/embeddings) over the promoted models",
        description="Serve each language's promoted model (and multi) found under the storage "
        "root, or the --model folders given, as the OpenAI embeddings API; a newly promoted "
        "version is swapped in while serving, without failing a request.",
    )
    serve.add_argument(
        "--storage-root",
        help=STORAGE_ROOT_HELP,
    )
    serve.add_argument(
        "--model",
        action="append",
        default=[],
        metavar="NAME=PATH",
        help="serve PATH (a model registry folder or a bundle) as NAME; repeatable; replaces "
        "the discovery under the storage root",
    )
    serve.add_argument("--host", default="127.0.0.1", help="0.0.0.0 to listen on every interface")
    serve.add_argument("--port", type=port_number, default=8000, help="1 to 65535 (default 8000)")
    serve.add_argument(
        "--reload-interval", type=float, default=2.0, help="seconds between promotion checks"
    )
    serve.add_argument("--threads", type=int, default=1, help="tokenizer threads per model")
    serve.add_argument(
        "--workers",
        type=positive_int,
        default=os.environ.get(WORKERS_ENV) or "1",  # (a str: argparse checks it like the flag)
        help=f"server processes on the port, each with its own copy of the models (default "
        f"${WORKERS_ENV} or 1; one per core serves the most: docs/serving.md)",
    )
    serve.add_argument("--max-inputs", type=int, default=Limits.max_inputs)
    serve.add_argument("--max-input-chars", type=int, default=Limits.max_input_chars)
    serve.set_defaults(handler=cmd_serve)


def served_folders(args: argparse.Namespace) -> dict[str, Path]:
    if args.model:
        folders = {}
        for item in args.model:
            name, sep, path = item.partition("=")
            if not sep or not name or not path:
                raise ValueError(f"--model {item!r}: expected NAME=PATH")
            if not Path(path).is_dir():
                raise ValueError(f"--model {item!r}: {path} is not a folder")
            folders[name] = Path(path)
        return folders
    root = storage_root(args.storage_root)
    if root is None:
        raise ValueError(
            f"give --storage-root, set {STORAGE_ENV}, or name models with --model "
            f"({NO_STORAGE_ROOT})"
        )
    from psp_core.serving.models import discover

    folders = discover(root)
    if not folders:
        raise ValueError(
            f"no promoted model under {root} (materialize psp_model first, e.g. make run)"
        )
    return folders


def cmd_serve(args: argparse.Namespace) -> None:
    # (Starlette and uvicorn are imported for this command only; they come with the [serve]
    # extra: one line naming it, before any check or work)
    for module in ("starlette", "uvicorn", "orjson"):
        require(module, "serve", "psp serve")
    from psp_core.serving.server import ServeSettings, check_port_free, serve

    # a port another program holds is one line, before any model is loaded or banner printed
    check_port_free(args.host, args.port)
    settings = ServeSettings(
        folders=served_folders(args),
        host=args.host,
        port=args.port,
        threads=args.threads,
        reload_interval=args.reload_interval,
        max_inputs=args.max_inputs,
        max_input_chars=args.max_input_chars,
    )
    serve(settings, args.workers)
