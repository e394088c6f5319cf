"""Show a library's Python ``logging`` records in a Dagster step's log.

``psp_core`` logs through ``logging`` (loggers under ``psp_core``), which Dagster does not
capture unless the instance lists the loggers in ``python_logs.managed_python_loggers``. Inside
:func:`logs_to_dagster`, the records of the named logger and its children go to ``context.log``
at their own level, so training's "resuming from ..." and progress lines appear in the run's
event log whatever the instance settings.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager


class _DagsterHandler(logging.Handler):
    """Forwards each record to a Dagster log manager (``context.log``)."""

    def __init__(self, dagster_log: logging.Logger, level: int) -> None:
        super().__init__(level)
        self.dagster_log = dagster_log
        self.setFormatter(logging.Formatter("%(name)s: %(message)s"))

    def emit(self, record: logging.LogRecord) -> None:
        try:
            self.dagster_log.log(record.levelno, self.format(record))
        except Exception:
            self.handleError(record)


def to_current_step(message: str, level: int = logging.INFO) -> None:
    """Say ``message`` in the log of the Dagster step running now, if any (outside a step: a
    script, a benchmark, nothing is said there)."""
    try:
        from dagster import AssetExecutionContext

        context = AssetExecutionContext.get()
    except Exception:
        return
    context.log.log(level, message)


@contextmanager
def logs_to_dagster(
    dagster_log: logging.Logger, logger_name: str = "psp_core", level: int = logging.INFO
) -> Iterator[None]:
    """Forward the records of ``logger_name`` (and its children) at ``level`` or above to
    ``dagster_log`` inside the block.

    The logger is lowered to ``level`` for the block if it would drop such records, and put back
    afterwards; its records still reach the other handlers as before.
    """
    logger = logging.getLogger(logger_name)
    handler = _DagsterHandler(dagster_log, level)
    previous_level = logger.level
    if logger.getEffectiveLevel() > level:
        logger.setLevel(level)
    logger.addHandler(handler)
    try:
        yield
    finally:
        logger.removeHandler(handler)
        logger.setLevel(previous_level)
