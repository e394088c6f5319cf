"""The ``psp`` command line: the parser assembled from each subcommand's module, and ``main``,
which runs one and turns every user error into one line and exit 2."""

from __future__ import annotations

import argparse
import logging
import signal
import sys
import threading
from contextlib import contextmanager
from signal import SIGHUP, SIGINT, SIGTERM

import psp_core
from psp_core.cli.bundles import add_export_parser, add_info_parser
from psp_core.cli.embed import add_embed_parser
from psp_core.cli.errors import CliError, one_line, stopped_line
from psp_core.cli.evaluate import add_evaluate_parser, add_fetch_eval_data_parser
from psp_core.cli.mine import add_mine_parser
from psp_core.cli.models import add_models_parser
from psp_core.cli.score import add_score_parser
from psp_core.cli.serve import add_serve_parser
from psp_core.cli.train import add_train_parser
from psp_core.extras import MissingExtra
from psp_core.files.output_files import OutputError, abandon_stdout
from psp_core.models.bundle import BundleError

#: errors of modules that need an extra (torch, h5py, requests), caught where a command imported
#: them: a module that was not imported raised none of its errors, and an install that only
#: embeds does not pay for importing them (module -> its error classes)
_OPTIONAL_ERRORS = {
    "psp_core.files.download": ("DownloadError",),
    "psp_core.training.checkpoint": ("CheckpointWriteError",),
    "psp_core.training.steps": ("NonFiniteLossError",),
    "psp_core.training.training_file": ("TrainingFileError",),
}
_USER_ERRORS = (CliError, OutputError, BundleError, MissingExtra, OSError, ValueError)


def user_errors() -> tuple[type[BaseException], ...]:
    """The errors ``main`` prints as one line with exit code 2."""
    loaded = [
        getattr(sys.modules[module], name)
        for module, names in _OPTIONAL_ERRORS.items()
        if module in sys.modules
        for name in names
    ]
    return (*_USER_ERRORS, *loaded)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="psp", description="P-SP sentence embeddings")
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    parser.add_argument("--version", action="version", version=f"psp {psp_core.__version__}")
    commands = parser.add_subparsers(dest="command", required=True)
    for add in (
        add_embed_parser,
        add_score_parser,
        add_train_parser,
        add_models_parser,
        add_serve_parser,
        add_info_parser,
        add_export_parser,
        add_evaluate_parser,
        add_mine_parser,
        add_fetch_eval_data_parser,
    ):
        add(commands)
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
    """SIGTERM and SIGHUP raise :class:`Terminated`, and SIGINT ``KeyboardInterrupt``, in the
    main thread while the block runs; a signal ignored by whoever started the process (``nohup``,
    a background job's Ctrl-C) stays ignored."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    raising = {SIGTERM: _raise_terminated, SIGHUP: _raise_terminated}
    raising[SIGINT] = signal.default_int_handler
    previous = {
        sig: signal.signal(sig, handler)
        for sig, handler in raising.items()
        if signal.getsignal(sig) is not signal.SIG_IGN
    }
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    args.argv = list(sys.argv[1:] if argv is None else argv)  # (for a message giving a command)
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    if not args.verbose:  # (torch logs its caches' statistics at exit, at info)
        logging.getLogger("torch").setLevel(logging.WARNING)
    try:
        with _signals_raise():
            args.handler(args)
    except BrokenPipeError:
        # whoever read our standard output stopped (psp score ... | head): stop quietly
        abandon_stdout()
        return 1
    except KeyboardInterrupt:
        print(stopped_line(SIGINT), file=sys.stderr)
        return 128 + SIGINT  # 130, as shells report Ctrl-C
    except Terminated as stop:
        print(stopped_line(stop.signum), file=sys.stderr)
        return 128 + stop.signum
    except user_errors() as error:
        print(f"psp: error: {one_line(error)}", file=sys.stderr)
        return 2
    return 0
