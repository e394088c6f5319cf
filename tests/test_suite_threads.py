"""docs/development.md: torch takes one OpenMP thread in the tests and in the processes they
start (``OMP_NUM_THREADS=1``, set by ``tests/conftest.py`` unless the caller set it)."""

from __future__ import annotations

import os
import subprocess
import sys

import torch

from tests.conftest import one_openmp_thread_unless_set


def test_torch_here_and_in_a_started_process_takes_the_suites_threads() -> None:
    threads = os.environ["OMP_NUM_THREADS"]  # (set: by conftest, or by whoever ran pytest)
    assert torch.get_num_threads() == int(threads)
    child = subprocess.run(
        [sys.executable, "-c", "import torch; print(torch.get_num_threads())"],
        capture_output=True, text=True, timeout=120, check=True,
    )  # fmt: skip
    assert child.stdout.strip() == threads


def test_a_thread_count_the_caller_set_is_kept() -> None:
    chosen = {"OMP_NUM_THREADS": "3"}
    assert not one_openmp_thread_unless_set(chosen) and chosen == {"OMP_NUM_THREADS": "3"}
    unset = {"PATH": "/bin"}
    assert one_openmp_thread_unless_set(unset) and unset == {"PATH": "/bin", "OMP_NUM_THREADS": "1"}
