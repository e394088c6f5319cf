"""``python -m psp_core.cli``: the ``psp`` command (what ``torchrun -m`` starts)."""

import sys

from psp_core.cli.main import main

sys.exit(main())
