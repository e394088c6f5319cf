"""The outputs that are not regular files, round after round: every command that writes a file
writes all of its bytes into a FIFO, into a character device whose bytes can be read back (a
raw pseudo-terminal) and through a symbolic link, again and again, so that a race that loses
an output once in hundreds of runs shows. ``PSP_OUTPUT_STRESS_ROUNDS`` sets the rounds (the
suite runs a few; a stress run sets hundreds), and under ``make test`` they run beside the
rest of the suite on every core.

The first test attacks the tests' own reader: a writer that holds the interpreter until the
moment it writes, then ends the block at once, the way ``psp evaluate`` writes its small JSON
last. The reader once stopped between its last empty wait and that write, and the output
arrived empty."""

from __future__ import annotations

import os
import random
import subprocess
import sys
import time

import pytest

from psp_core.cli import main
from tests.psp_core.cli.test_cli_outputs import (
    FILE_COMMANDS,
    argv,
    decoded,
    expected_output,
    output_name,
)
from tests.psp_core.filesystems import drained_fifo, drained_terminal, is_fifo, listing

ROUNDS = int(os.environ.get("PSP_OUTPUT_STRESS_ROUNDS", "3"))


def _busy_for(seconds: float) -> None:
    """Hold the interpreter (pure Python, no sleep) for ``seconds``."""
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


def test_the_fifo_reader_gets_a_write_made_as_the_block_ends(tmp_path):
    rng = random.Random(7)
    short = []
    for round_number in range(300):
        fifo = tmp_path / f"fifo-{round_number}"
        payload = bytes([round_number % 251]) * rng.randint(1, 300)
        with drained_fifo(fifo) as received:
            _busy_for(rng.uniform(0, 0.012))
            descriptor = os.open(fifo, os.O_WRONLY)
            os.write(descriptor, payload)
            os.close(descriptor)
        if bytes(received) != payload:
            short.append((round_number, len(received), len(payload)))
    assert short == []


def _decoded_or_error(name: str, data: bytes):
    """What ``data`` decodes to, or why it does not (a short or damaged output)."""
    try:
        return decoded(name, data)
    except Exception as error:  # a failure to report with the round, not to stop at
        return f"undecodable: {error!r}"


@pytest.mark.parametrize("name", FILE_COMMANDS)
def test_each_command_fills_a_fifo_a_terminal_and_a_link_target_every_round(
    tmp_path, bundle, inputs, name
):
    expected = expected_output(tmp_path, name, bundle, inputs)
    link = tmp_path / "out" / output_name(name, "latest")
    target = tmp_path / "runs" / output_name(name, "v1")
    link.parent.mkdir()
    target.parent.mkdir()
    link.symlink_to(target)
    failures = []
    for round_number in range(ROUNDS):
        fifo = tmp_path / f"pipes-{round_number}" / output_name(name, "fifo")
        with drained_fifo(fifo) as through_fifo:
            assert main(argv(name, bundle, inputs, fifo)) == 0
        assert is_fifo(fifo) and listing(fifo.parent) == [fifo.name]

        with drained_terminal() as (terminal, through_terminal):
            # named through a link, so that the output's suffix (.parquet) is the test's
            named = tmp_path / f"terminals-{round_number}" / output_name(name, "terminal")
            named.parent.mkdir()
            named.symlink_to(terminal)
            assert main(argv(name, bundle, inputs, named)) == 0
        assert named.is_symlink() and listing(named.parent) == [named.name]

        assert main(argv(name, bundle, inputs, link)) == 0
        assert link.is_symlink() and listing(link.parent) == [link.name]
        assert listing(target.parent) == [target.name]

        for kind, data in [
            ("fifo", bytes(through_fifo)),
            ("terminal", bytes(through_terminal)),
            ("link", target.read_bytes()),
        ]:
            if _decoded_or_error(name, data) != expected:
                failures.append((round_number, kind, len(data)))
    assert failures == []


_WRITE_THEN_ASK_FOR_A_TERMINAL = """
import os, sys
from psp_core.cli import main
status = main(sys.argv[1:])
try:
    os.close(os.open("/dev/tty", os.O_RDONLY))
    print("controlling terminal")
except OSError:
    print("none")
sys.exit(status)
"""


def test_a_terminal_output_does_not_become_the_controlling_terminal(tmp_path, bundle, inputs):
    """A session leader with no terminal (a daemon) writing to one: the terminal must not
    become its controlling terminal (its closing would then hang the writer up)."""
    with drained_terminal() as (terminal, received):
        completed = subprocess.run(
            [sys.executable, "-c", _WRITE_THEN_ASK_FOR_A_TERMINAL]
            + argv("score", bundle, inputs, terminal),
            start_new_session=True,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=120,
        )
    assert completed.returncode == 0, completed.stderr
    assert completed.stdout.strip() == "none"
    assert decoded("score", bytes(received)) == expected_output(tmp_path, "score", bundle, inputs)
