"""``python -m psp_core.cli``: the ``psp`` command (what ``torchrun -m`` starts)."""

from psp_core.cli.entry import run

run()
