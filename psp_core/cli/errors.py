"""User errors of the ``psp`` commands and how they reach the terminal: one line, exit 2."""

from __future__ import annotations

import os
import sys
from pathlib import Path


class CliError(Exception):
    """A user error: printed as ``psp: error: ...`` with exit code 2."""


def require_file(path: Path, what: str) -> Path:
    if not path.exists():
        raise CliError(f"{what} {path} does not exist")
    if not path.is_file():
        raise CliError(f"{what} {path} is not a file")
    return path


def abandon_stdout() -> None:
    """Point standard output at /dev/null, so that the interpreter's last flush of what could
    not be written does not fail again at exit (the recipe of Python's ``signal`` docs)."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)


def one_line(error: Exception) -> str:
    """``PATH: reason`` for an OSError of the standard library (``[Errno 13] ...: 'PATH'``);
    our own errors already say what they mean."""
    plain = isinstance(error, OSError) and type(error).__str__ is OSError.__str__
    if plain and error.filename is not None and error.strerror:
        names = f"{error.filename} -> {error.filename2}" if error.filename2 else error.filename
        return f"{names}: {error.strerror}"
    return str(error)
