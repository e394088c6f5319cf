"""How long something takes, as the progress lines of every long step print it (training, the
corpus stages, downloads): one short form, so that the event log and the CLI read alike."""

from __future__ import annotations

import math


def format_duration(seconds: float) -> str:
    """``1h02m``, ``4m05s``, ``12s``."""
    if not math.isfinite(seconds):
        return "?"
    seconds = max(0, round(seconds))
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    if hours:
        return f"{hours}h{minutes:02d}m"
    if minutes:
        return f"{minutes}m{secs:02d}s"
    return f"{secs}s"
