"""The built-in evaluation suites, one module each, registered in this order (the order of
every table): STS 2012-2016, STS 2017, the STS Benchmark, Tatoeba, speed. A new suite is a
module like these, imported here (or registered by your own code:
``psp_core.evaluation.register``)."""

# isort: skip_file
# (the order of the imports is the order of the registry)
from psp_core.evaluation.suites import sts_years  # noqa: F401
from psp_core.evaluation.suites import sts17  # noqa: F401
from psp_core.evaluation.suites import stsb  # noqa: F401
from psp_core.evaluation.suites import tatoeba  # noqa: F401
from psp_core.evaluation.suites import speed  # noqa: F401
