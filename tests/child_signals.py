"""Signal dispositions for the processes tests start."""

from __future__ import annotations

import signal


def default_sigint() -> None:
    """A ``preexec_fn``: the child takes Ctrl-C as from a terminal. A test run started in the
    background (a shell's ``&``) ignores SIGINT, and its children would inherit that, so a test
    that sends SIGINT would see the child carry on instead of stopping."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
