"""The package's one compiled module; everything else is declared in pyproject.toml.

``psp_core.inference.fast._sums``: the sentence sums without torch (psp_core/inference/fast/pooling.py,
benchmarks/RESULTS.md#light-install). Optional: where no C compiler is found the install goes on
without it, and embedding uses scipy's product instead (the same vectors, slower).
"""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "psp_core.inference.fast._sums", ["psp_core/inference/fast/_sums.c"], optional=True
        ),
    ]
)
