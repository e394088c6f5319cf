"""Signal dispositions for the processes tests start."""

from __future__ import annotations

import signal


def default_sigint() -> None:
    """A ``preexec_fn``: the child takes Ctrl-C, SIGTERM and a hangup as from a terminal. A
    test run started in the background (a shell's ``&``) ignores SIGINT, one started with
    ``nohup`` (or by a CI runner that does) ignores SIGHUP, and its children would inherit
    that: ``psp`` keeps a signal ignored when it starts, so a test that sends one would see the
    child carry on instead of stopping."""
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, signal.SIG_DFL)
