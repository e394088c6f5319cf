"""The ``psp`` console script: a stop signal is taken care of from the first line, before the
command's modules are imported.

Until ``main`` runs a command (and again once it has run), SIGTERM, SIGHUP and SIGINT end the
process at once with the one line ``main`` prints for them and its exit status: there is nothing
to clean up yet (or any more), and the interpreter's defaults would end it without a word (or
with a traceback of whatever was being imported, for Ctrl-C). While the command runs, ``main``
turns them into exceptions, so that its temporaries are removed on the way out. A signal the
caller ignores (``nohup``, a background job's Ctrl-C) stays ignored."""

from __future__ import annotations

import atexit
import os
import signal
import sys

from psp_core.cli.errors import stopped_line


def stop_at_once(signum: int, frame) -> None:
    os.write(2, f"{stopped_line(signum)}\n".encode())
    os._exit(128 + signum)


def run() -> None:
    defaults = {signal.SIGTERM: signal.SIG_DFL, signal.SIGHUP: signal.SIG_DFL}
    defaults[signal.SIGINT] = signal.default_int_handler
    for signum, default in defaults.items():
        if signal.getsignal(signum) is default:
            signal.signal(signum, stop_at_once)
    atexit.register(_exit_before_teardown)  # (registered first: run after every other)
    from psp_core.cli.main import main

    try:
        status = main()
    except SystemExit as stop:  # (argparse's usage errors, --help, --version)
        status = _exit_status(stop.code)
    _status.append(status)
    sys.exit(status)


def _exit_status(code) -> int:
    """The exit status ``sys.exit(code)`` gives (a message is printed, and is status 1)."""
    if code is None or isinstance(code, int):
        return code or 0
    print(code, file=sys.stderr)
    return 1


_status: list[int] = []


def _exit_before_teardown() -> None:
    """End the process once the exit functions have run and the standard streams are flushed,
    without the interpreter's teardown of its modules: the signal handlers above are gone
    during that teardown, so a signal then would end the command, its work done, without a
    word (and the teardown of torch's modules is slow)."""
    status = _status[-1] if _status else 1  # (none: an uncaught error, status 1)
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # (as the interpreter's own exit does: status 120)
            status = status or 120
    os._exit(status)
