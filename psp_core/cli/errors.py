"""User errors of the ``psp`` commands and how they reach the terminal: one line, exit 2."""

from __future__ import annotations

import signal
from pathlib import Path


class CliError(Exception):
    """A user error: printed as ``psp: error: ...`` with exit code 2."""


def require_file(path: Path, what: str) -> Path:
    if not path.exists():
        raise CliError(f"{what} {path} does not exist")
    if not path.is_file():
        raise CliError(f"{what} {path} is not a file")
    return path


def one_line(error: Exception) -> str:
    """``PATH: reason`` for an OSError of the standard library (``[Errno 13] ...: 'PATH'``);
    our own errors already say what they mean."""
    plain = isinstance(error, OSError) and type(error).__str__ is OSError.__str__
    if plain and error.filename is not None and error.strerror:
        names = f"{error.filename} -> {error.filename2}" if error.filename2 else error.filename
        return f"{names}: {error.strerror}"
    return str(error)


def stopped_line(signum: int) -> str:
    """What ``psp`` prints when a signal stops it (exit status 128 + the signal's number)."""
    if signum == signal.SIGINT:
        return "psp: interrupted (Ctrl-C)"
    return f"psp: stopped by {signal.Signals(signum).name}"
