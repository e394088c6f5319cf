"""``psp serve``: the arguments and the handler of the command."""

from __future__ import annotations

import argparse
import ipaddress
import os
import re
import socket
from pathlib import Path

from psp_core.cli.arguments import port_number, positive_int
from psp_core.extras import require
from psp_core.models.hub import model_folder
from psp_core.models.registry import NO_STORAGE_ROOT, STORAGE_ENV, STORAGE_ROOT_HELP, storage_root
from psp_core.serving.limits import Limits

WORKERS_ENV = "PSP_SERVE_WORKERS"
KEYS_ENV = "PSP_API_KEY"


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
        help="serve PATH (a model registry folder, a bundle, or a bundle on the Hugging Face "
        "Hub: hf://ORG/NAME[@REVISION], fetched at start) as NAME; repeatable; replaces the "
        "discovery under the storage root",
    )
    serve.add_argument("--host", default="127.0.0.1", help="0.0.0.0 to listen on every interface")
    serve.add_argument("--port", type=port_number, default=8000, help="1 to 65535 (default 8000)")
    serve.add_argument(
        "--reload-interval",
        type=reload_interval,
        default=2.0,
        help=f"seconds between promotion checks, at least {MIN_RELOAD_INTERVAL:g} (default 2)",
    )
    serve.add_argument(
        "--threads", type=positive_int, default=1, help="tokenizer threads per model (default 1)"
    )
    serve.add_argument(
        "--workers",
        type=positive_int,
        default=os.environ.get(WORKERS_ENV) or "1",  # (a str: argparse checks it like the flag)
        help=f"server processes on the port, each with its own copy of the models (default "
        f"${WORKERS_ENV} or 1; one per core serves the most: docs/serving.md)",
    )
    serve.add_argument(
        "--worker-timeout",
        type=seconds_at_least(MIN_TIMEOUT),
        default=30.0,
        help="with --workers: seconds a worker may go without answering its supervisor before "
        f"it is killed and replaced, at least {MIN_TIMEOUT:g} (default 30)",
    )
    _add_access_arguments(serve)
    _add_limit_arguments(serve)
    serve.set_defaults(handler=cmd_serve)


def _add_access_arguments(serve) -> None:
    serve.add_argument(
        "--api-key",
        action="append",
        default=[],
        metavar="KEY",
        help=f"a key that requests must bear (Authorization: Bearer KEY); repeatable; also "
        f"${KEYS_ENV}, comma-separated; /health stays open",
    )
    serve.add_argument(
        "--allow-unauthenticated",
        action="store_true",
        help="listen on an address other than loopback without an API key",
    )
    serve.add_argument(
        "--cors-origin",
        action="append",
        default=[],
        metavar="ORIGIN",
        type=cors_origin,
        help="an origin (https://host[:port]) whose browser pages may call the API; repeatable "
        "(default: none, no CORS headers)",
    )


def _add_limit_arguments(serve) -> None:
    for flag, kind, default, what in (
        ("--max-inputs", positive_int, Limits.max_inputs, "inputs in one request"),
        ("--max-input-chars", positive_int, Limits.max_input_chars, "characters of one input"),
        (
            "--max-body-bytes",
            positive_int,
            Limits.max_body_bytes,
            "bytes of one request body (413 beyond)",
        ),
        (
            "--max-header-bytes",
            positive_int,
            Limits.max_header_bytes,
            "bytes of one request's line and headers (431 beyond)",
        ),
        ("--max-headers", positive_int, Limits.max_headers, "headers of one request (431 beyond)"),
        (
            "--keep-alive-timeout",
            positive_float,
            Limits.keep_alive_timeout,
            "seconds a connection may stay idle, before its first request or between two",
        ),
        (
            "--request-timeout",
            positive_float,
            Limits.request_timeout,
            "seconds to receive a request whole from its first byte (408 beyond)",
        ),
        (
            "--send-timeout",
            seconds_at_least(MIN_TIMEOUT),
            Limits.send_timeout,
            "seconds an answer may wait for its client to read any of it, at least 1 (then the "
            "connection is dropped)",
        ),
        (
            "--max-connections",
            positive_int,
            Limits.max_connections,
            "open connections per server process (a new one beyond it: 503, closed)",
        ),
        (
            "--max-concurrent-requests",
            positive_int,
            Limits.max_concurrent_requests,
            "embeddings requests in progress per server process (429 with Retry-After beyond)",
        ),
        (
            "--word-cache-bytes",
            positive_int,
            Limits.word_cache_bytes,
            "memory of each server process's word caches, its models' together (words past it, "
            "and words over 64 characters, go to sentencepiece uncached)",
        ),
    ):
        serve.add_argument(flag, type=kind, default=default, help=f"{what} (default {default:g})")


#: the shortest --reload-interval: each check reads the registry of every language served, and
#: an idle server polling faster would keep a core busy
MIN_RELOAD_INTERVAL = 0.1
_ORIGIN = re.compile(r"^(https?)://([A-Za-z0-9.-]+|\[[0-9A-Fa-f:.]+\])(:[0-9]{1,5})?$")


#: the shortest --worker-timeout and --send-timeout: a worker beats four times a timeout, and
#: an answer shorter-lived than a second would be dropped for an ordinary network's pause
MIN_TIMEOUT = 1.0


def seconds_at_least(minimum: float):
    """An argparse ``type``: a finite number of seconds, at least ``minimum``."""

    def seconds(text: str) -> float:
        value = positive_float(text)
        if value < minimum:
            raise argparse.ArgumentTypeError(f"must be at least {minimum:g} (seconds), got {text}")
        return value

    seconds.__name__ = "seconds"  # argparse names the type in its message for a bad value
    return seconds


reload_interval = seconds_at_least(MIN_RELOAD_INTERVAL)


def cors_origin(text: str) -> str:
    """An argparse ``type``: a browser origin, ``scheme://host[:port]`` (http or https, no
    path, no trailing slash: what a browser sends in ``Origin`` and compares exactly)."""
    found = _ORIGIN.match(text)
    if not found or (found.group(3) and not 1 <= int(found.group(3)[1:]) <= 65535):
        raise argparse.ArgumentTypeError(
            f"expected an origin like https://app.example.com or http://localhost:3000 "
            f"(scheme://host[:port], no path), got {text!r}"
        )
    return text


def positive_float(text: str) -> float:
    """An argparse ``type``: a number above 0 (seconds)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if not value > 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"must be a finite number above 0, got {text}")
    return value


def api_keys(args: argparse.Namespace) -> tuple[str, ...]:
    """The keys of ``--api-key`` and ``$PSP_API_KEY`` (comma-separated; blanks ignored)."""
    given = [*args.api_key, *os.environ.get(KEYS_ENV, "").split(",")]
    keys = tuple(dict.fromkeys(key.strip() for key in given if key.strip()))
    if any(not key.isprintable() or " " in key for key in keys):
        raise ValueError("an API key must be printable, without spaces")
    return keys


def is_loopback(host: str) -> bool:
    """Whether every address ``host`` names is a loopback one (127.0.0.0/8, ::1)."""
    try:
        infos = socket.getaddrinfo(host, None, type=socket.SOCK_STREAM)
    except socket.gaierror:
        return False
    return bool(infos) and all(
        ipaddress.ip_address(info[4][0].partition("%")[0]).is_loopback for info in infos
    )


def served_folders(args: argparse.Namespace) -> dict[str, Path]:
    if args.model:
        folders = {}
        for item in args.model:
            name, sep, path = item.partition("=")
            if not sep or not name or not path:
                raise ValueError(f"--model {item!r}: expected NAME=PATH")
            folder = model_folder(path)  # (a Hub model: fetched, or found in the cache)
            if not folder.is_dir():
                raise ValueError(f"--model {item!r}: {path} is not a folder")
            folders[name] = folder
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
    for module in ("starlette", "uvicorn", "httptools", "orjson"):
        require(module, "serve", "psp serve")
    from psp_core.serving.connections import ensure_file_limit
    from psp_core.serving.port_lock import port_lock
    from psp_core.serving.server import ServeSettings, check_port_free, serve

    keys = api_keys(args)
    if not keys and not args.allow_unauthenticated and not is_loopback(args.host):
        raise ValueError(
            f"--host {args.host} is reachable from other machines: give --api-key (or "
            f"${KEYS_ENV}), or --allow-unauthenticated to serve anyone who can connect"
        )
    limits = Limits(**{name: getattr(args, name) for name in vars(Limits())})
    ensure_file_limit(limits.max_connections)
    settings = ServeSettings(
        folders=served_folders(args),
        host=args.host,
        port=args.port,
        threads=args.threads,
        worker_timeout=args.worker_timeout,
        reload_interval=args.reload_interval,
        limits=limits,
        api_keys=keys,
        cors_origins=tuple(args.cors_origin),
    )
    with port_lock(args.port):  # one psp serve per port, even two started at the same instant
        # a port another program holds is one line, before any model is loaded or banner printed
        check_port_free(args.host, args.port)
        serve(settings, args.workers)
