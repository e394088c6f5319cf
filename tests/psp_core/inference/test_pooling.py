"""Every implementation of the sentence sums (``psp_core/inference/pooling.py``: torch, scipy,
numpy) gives the float64 sums to float32 rounding, empty sentences zero, from float32 and float16
tables, and writes into the ``out`` it is given."""

from __future__ import annotations

import numpy as np
import pytest

from psp_core.inference import pooling


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


def test_weighted_sums_uses_the_first_implementation_installed() -> None:
    installed = [
        name
        for name, (module, _) in pooling.IMPLEMENTATIONS.items()
        if pooling._optional(module) is not None
    ]
    assert pooling.backend() == installed[0]
    table, ids, offsets, weights = _bags(seed=1)
    got = pooling.weighted_sums(table, ids, offsets, weights)
    assert got.dtype == np.float32
    np.testing.assert_allclose(got, _expected(table, ids, offsets, weights), atol=1e-5)
    assert pooling.weighted_sums(table, ids[:0], offsets[:1], weights[:0]).shape == (0, 24)
