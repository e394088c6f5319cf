"""Argument types shared by the ``psp`` commands."""

from __future__ import annotations

import argparse


def positive_int(text: str) -> int:
    """An argparse ``type``: a whole number of at least 1 (a clear usage error otherwise)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value
