"""Every implementation of the sentence sums (``psp_core/inference/fast/pooling.py``: torch, the
compiled loop, scipy, numpy) gives the float64 sums to float32 rounding, empty sentences zero,
from float32 and float16 tables, and writes into the ``out`` it is given; which one sums."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from psp_core.extras import optional_module
from psp_core.inference.fast import pooling


def _bags(seed: int = 0, count: int = 40, vocab: int = 300, dim: int = 24):
    rng = np.random.default_rng(seed)
    lengths = rng.integers(0, 12, count)
    lengths[[0, 7, -1]] = 0  # empty bags first, inside and last
    offsets = np.zeros(count + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    ids = rng.integers(0, vocab, offsets[-1], dtype=np.int64)
    weights = rng.random(len(ids), dtype=np.float32)
    table = rng.standard_normal((vocab, dim), dtype=np.float32)
    return table, ids, offsets, weights


def _expected(table, ids, offsets, weights) -> np.ndarray:
    rows = table.astype(np.float64)[ids] * weights.astype(np.float64)[:, None]
    return np.stack(
        [rows[offsets[i] : offsets[i + 1]].sum(axis=0) for i in range(len(offsets) - 1)]
    )


@pytest.mark.parametrize("name", list(pooling.IMPLEMENTATIONS))
@pytest.mark.parametrize("dtype", [np.float32, np.float16])
def test_each_implementation_gives_the_weighted_sums(name, dtype) -> None:
    module, sums = pooling.IMPLEMENTATIONS[name]
    # (a float16 table's rows are exact in float32; torch adds them in float16, the others in
    # float32)
    tolerance = 1e-2 if name == "torch" and dtype == np.float16 else 1e-5
    pytest.importorskip(module)
    table, ids, offsets, weights = _bags()
    table = table.astype(dtype)
    out = np.full((len(offsets) - 1, table.shape[1]), np.nan, dtype=np.float32)
    sums(table, ids, offsets, weights, out)
    np.testing.assert_allclose(out, _expected(table, ids, offsets, weights), atol=tolerance)
    assert not out[[0, 7, -1]].any()


def test_weighted_sums_gives_the_sums_whichever_implementation_it_takes() -> None:
    table, ids, offsets, weights = _bags(seed=1)
    got = pooling.weighted_sums(table, ids, offsets, weights)
    assert got.dtype == np.float32
    np.testing.assert_allclose(got, _expected(table, ids, offsets, weights), atol=1e-5)
    assert pooling.weighted_sums(table, ids[:0], offsets[:1], weights[:0]).shape == (0, 24)


#: in a fresh process: sums of many sentences, then the threads asked (argv[1]); what summed,
#: and whether torch was imported, before and after
WHICH_SUMS = """
import sys
import numpy as np
from psp_core.inference.fast import pooling
table = np.ones((50, 8), dtype=np.float32)
offsets = np.arange(0, 3 * 200 + 1, 3)
ids = np.zeros(600, dtype=np.int64)
pooling.weighted_sums(table, ids, offsets, np.ones(600, dtype=np.float32))
print(pooling.backend(), "torch" in sys.modules)
pooling.set_threads(int(sys.argv[1]))
pooling.weighted_sums(table, ids, offsets, np.ones(600, dtype=np.float32))
print(pooling.backend(), "torch" in sys.modules)
"""


@pytest.mark.parametrize("threads", [1, 2])
def test_one_thread_sums_without_importing_torch_and_several_take_torch(threads) -> None:
    """Where the compiled loop was built, sums on one thread never import torch (seconds),
    even where it is installed; asking for more threads takes torch where it is installed."""
    done = subprocess.run(
        [sys.executable, "-c", WHICH_SUMS, str(threads)],
        capture_output=True,
        text=True,
        check=True,
        cwd=Path(__file__).parents[3],
    )
    first, then = (line.split() for line in done.stdout.splitlines())
    light = "compiled" if optional_module(pooling.COMPILED_MODULE) else "scipy"
    assert first == [light, "False"]
    if threads > 1 and optional_module("torch"):
        assert then == ["torch", "True"]
    else:
        assert then == [light, "False"]


def test_sums_take_torch_where_it_is_already_imported() -> None:
    pytest.importorskip("torch")
    assert pooling.backend() == "torch"


def _compiled():
    return pytest.importorskip(pooling.COMPILED_MODULE, reason="the compiled sums were not built")


@pytest.mark.parametrize("dim", [1, 63, 64, 65, 1031])
def test_the_compiled_loop_sums_every_width_and_into_any_out(dim) -> None:
    """Widths below, at and past its block of columns; ``out`` float16 or a strided view (the
    loop writes a float32 copy then)."""
    _compiled()
    table, ids, offsets, weights = _bags(seed=dim, vocab=500)
    table = np.random.default_rng(dim).standard_normal((500, dim), dtype=np.float32)
    want = _expected(table, ids, offsets, weights)
    sums = pooling.IMPLEMENTATIONS["compiled"][1]
    for out in (
        np.full((len(offsets) - 1, dim), np.nan, dtype=np.float32),
        np.full((len(offsets) - 1, dim), np.nan, dtype=np.float16),
        np.full((len(offsets) - 1, 2 * dim), np.nan, dtype=np.float32)[:, ::2],
    ):
        sums(table, ids, offsets, weights, out)
        tolerance = 1e-2 if out.dtype == np.float16 else 1e-4
        np.testing.assert_allclose(out, want, atol=tolerance, rtol=tolerance)


def test_the_compiled_loop_refuses_what_would_read_outside_its_arrays() -> None:
    """An id outside the table, offsets past the ids or decreasing, mismatched shapes and wrong
    types are errors before any sum (``out`` is left as it was), never a read out of bounds."""
    compiled = _compiled()
    table, ids, offsets, weights = _bags(seed=2)
    count, dim = len(offsets) - 1, table.shape[1]
    out = np.full((count, dim), 7.0, dtype=np.float32)
    bad_id = ids.copy()
    bad_id[len(ids) // 2] = len(table)
    negative = ids.copy()
    negative[-1] = -1
    past = offsets.copy()
    past[-1] = len(ids) + 1
    decreasing = offsets.copy()
    decreasing[3], decreasing[4] = decreasing[4] + 1, decreasing[3]
    cases = [
        (IndexError, "outside the 300 rows", (table, bad_id, offsets, weights, out)),
        (IndexError, "id -1", (table, negative, offsets, weights, out)),
        (ValueError, "offsets outside", (table, ids, past, weights, out)),
        (ValueError, "offsets decrease", (table, ids, decreasing, weights, out)),
        (ValueError, "one per id", (table, ids, offsets, weights[:-1], out)),
        (ValueError, "one more item", (table, ids, offsets, weights, out[:-1])),
        (TypeError, "ids: expected", (table, ids.astype(np.int32), offsets, weights, out)),
        (TypeError, "table: expected", (table.astype(np.float64), ids, offsets, weights, out)),
        (TypeError, "weights: expected", (table, ids, offsets, weights[None], out)),
    ]
    for error, words, arguments in cases:
        with pytest.raises(error, match=words):
            compiled.weighted_sums(*arguments)
    with pytest.raises((TypeError, BufferError, ValueError)):
        compiled.weighted_sums(table, ids, offsets, weights, out[:, ::2])  # (not contiguous)
    read_only = out.copy()
    read_only.flags.writeable = False
    with pytest.raises((TypeError, BufferError, ValueError)):
        compiled.weighted_sums(table, ids, offsets, weights, read_only)
    assert (out == 7.0).all()
