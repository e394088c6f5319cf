"""Arguments shared by the ``psp`` commands: their types, and the options of every command that
runs a model."""

from __future__ import annotations

import argparse
import math


def positive_int(text: str) -> int:
    """An argparse ``type``: a whole number of at least 1 (a clear usage error otherwise)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def finite_float(text: str) -> float:
    """An argparse ``type``: a number that is neither NaN nor infinite (a threshold or a rate
    compared with them would keep nothing, or everything, without a word)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"must be a finite number, got {text}")
    return value


def port_number(text: str) -> int:
    """An argparse ``type``: a TCP port a server can listen on, 1 to 65535."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a port number, got {text!r}") from None
    if not 1 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"a port is 1 to 65535, got {value}")
    return value


def add_model_runtime_arguments(parser: argparse.ArgumentParser) -> None:
    """How a loaded model runs, for the commands that embed: its device, the dtype of its
    table and the dimensions kept."""
    parser.add_argument(
        "--device",
        default="auto",
        help="where the averaging runs: auto (cuda when present; the CPU where torch is not "
        "installed), cpu, cuda, cuda:1, ...",
    )
    parser.add_argument(
        "--dtype",
        choices=["float32", "float16"],
        default="float32",
        help="the embedding table in memory: float16 halves it and averages faster",
    )
    parser.add_argument(
        "--dim",
        type=int,
        help="keep the first DIM dimensions (a model trained with --matryoshka-dims)",
    )
