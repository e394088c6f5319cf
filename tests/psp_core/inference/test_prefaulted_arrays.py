"""Large outputs mapped up front (psp_core/inference/fast/prefaulted_arrays.py): ordinary writable private arrays."""

from __future__ import annotations

import os
import sys

import numpy as np
import pytest

from psp_core.inference.fast.prefaulted_arrays import POPULATE_BYTES, fresh_float32


def test_a_large_output_is_a_writable_private_array():
    rows = POPULATE_BYTES // (1024 * 4) + 1
    array = fresh_float32((rows, 1024))
    assert array.shape == (rows, 1024) and array.dtype == np.float32
    assert array.flags.c_contiguous and array.flags.writeable
    array[:] = 2.0
    assert float(array[-1, -1]) == 2.0
    if sys.platform.startswith("linux"):
        assert not array.flags.owndata  # (the mapping, not numpy's allocation)
        pid = os.fork()
        if pid == 0:  # a child's writes stay in the child (copy on write)
            array[:] = 5.0
            os._exit(0)
        os.waitpid(pid, 0)
        assert float(array.max()) == 2.0


@pytest.mark.parametrize("shape", [(0, 8), (10, 8)])
def test_a_small_output_is_numpy_s_own(shape):
    array = fresh_float32(shape)
    assert array.shape == shape and array.flags.owndata
