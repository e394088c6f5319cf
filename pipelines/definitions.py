"""The project's single Dagster ``Definitions``, loaded by ``workspace.yaml``.

The language-partitioned assets, jobs, schedule and sensor are assembled here as they land;
``psp_core`` and ``ops`` are usable on their own in the meantime.
"""

from dagster import Definitions

defs = Definitions()
