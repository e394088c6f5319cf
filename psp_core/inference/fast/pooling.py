"""Per sentence, the weighted sum of its rows of an embedding table: how ``embed`` averages.

Sentence ``i`` is ``ids[offsets[i]:offsets[i + 1]]`` (CSR rows, see
:mod:`psp_core.tokenization.csr`) with one weight per id; a mean is the sum weighted by
1/length. Four implementations give the same sums to float32 rounding
(benchmarks/RESULTS.md#light-install):

* ``torch``: torch's ``embedding_bag`` in sum mode with per-sample weights (torch comes with
  the ``[train]`` extra; it sums on several threads where asked, see :func:`set_threads`);
* ``compiled``: this package's own loop in C (``_sums.c``, built when the package is
  installed where a C compiler is found): as fast as torch on one thread, without torch;
* ``scipy``: scipy's product of a sparse matrix (one row per sentence, its ids as columns, its
  weights as values) with the table: the plain install's path where nothing could be compiled;
* ``numpy``: per sentence, its weights times its gathered rows (a Python loop over sentences).

Which one sums (:func:`backend`): torch where it is already imported (training, a GPU, a
caller's own code: it costs nothing more) or where more than one thread is asked of the sums
(:func:`set_threads`); otherwise the compiled loop, as fast on one thread, so that embedding on
one thread never imports torch (seconds) even where it is installed; where the loop was not
built, scipy, then numpy. A call of fewer than :data:`FEW_SENTENCES` sentences does not import
scipy for itself either (``psp embed`` of a line): the numpy loop then.
"""

from __future__ import annotations

import logging
import sys

import numpy as np

from psp_core.extras import optional_module, torch_module

log = logging.getLogger(__name__)


def _torch_sums(table, ids, offsets, weights, out) -> None:
    torch = torch_module()
    rows = torch.from_numpy(table)
    with torch.inference_mode():
        out[:] = torch.nn.functional.embedding_bag(
            torch.from_numpy(ids),
            rows,
            torch.from_numpy(offsets[:-1]),
            mode="sum",
            per_sample_weights=torch.from_numpy(weights).to(rows.dtype),
        ).numpy()


COMPILED_MODULE = "psp_core.inference.fast._sums"


def _compiled_sums(table, ids, offsets, weights, out) -> None:
    compiled = optional_module(COMPILED_MODULE)
    if table.dtype != np.float32:  # (the loop reads float32: convert the rows it needs)
        table, ids = table[ids].astype(np.float32), np.arange(len(ids), dtype=np.int64)
    direct = out.dtype == np.float32 and out.flags.c_contiguous
    target = out if direct else np.empty(out.shape, dtype=np.float32)
    compiled.weighted_sums(
        np.ascontiguousarray(table),
        np.ascontiguousarray(ids, dtype=np.int64),
        np.ascontiguousarray(offsets, dtype=np.int64),
        np.ascontiguousarray(weights, dtype=np.float32),
        target,
    )
    if not direct:
        out[:] = target


def _scipy_sums(table, ids, offsets, weights, out) -> None:
    sparse = optional_module("scipy.sparse")
    if table.dtype != np.float32:  # (scipy would convert the whole table on every call)
        table, ids = table[ids].astype(np.float32), np.arange(len(ids), dtype=np.int64)
    weights = weights.astype(np.float32, copy=False)
    matrix = sparse.csr_array((weights, ids, offsets), shape=(len(offsets) - 1, len(table)))
    out[:] = matrix @ table


def _numpy_sums(table, ids, offsets, weights, out) -> None:
    bounds = offsets.tolist()
    weights = weights.astype(np.float32, copy=False)
    for i, (low, high) in enumerate(zip(bounds[:-1], bounds[1:], strict=True)):
        if high > low:
            np.matmul(weights[low:high], table[ids[low:high]], out=out[i])
        else:
            out[i] = 0


#: below this many sentences in a call, no implementation is imported for it (see above)
FEW_SENTENCES = 16

#: the implementations, each with the module it needs, in the order preferred (torch only where
#: it is taken: see backend)
IMPLEMENTATIONS = {
    "torch": ("torch", _torch_sums),
    "compiled": (COMPILED_MODULE, _compiled_sums),
    "scipy": ("scipy.sparse", _scipy_sums),
    "numpy": ("numpy", _numpy_sums),
}


#: the threads asked of the sums by :func:`set_threads` (``None``: none asked)
_asked_threads: int | None = None
#: torch's own count of threads before :func:`set_threads` first changed it
_torch_threads_before: list[int] = []
#: the implementation the ``-v`` log last named
_reported: str | None = None


def backend() -> str:
    """The implementation :func:`weighted_sums` uses here for a call of many sentences (see the
    module's docstring)."""
    several = _asked_threads is not None and _asked_threads > 1
    takes_torch = "torch" in sys.modules or several
    return next(
        (
            name
            for name, (module, _) in IMPLEMENTATIONS.items()
            if (name != "torch" or takes_torch) and optional_module(module)
        ),
        "torch",  # (nothing else is here)
    )


def weighted_sums(
    table: np.ndarray,
    ids: np.ndarray,
    offsets: np.ndarray,
    weights: np.ndarray,
    out: np.ndarray | None = None,
) -> np.ndarray:
    """Per bag ``ids[offsets[i]:offsets[i + 1]]`` (``offsets[0] == 0``), the sum of its rows of
    ``table`` (a numpy array, float32 or float16), each times its weight: float32
    ``[len(offsets) - 1, dim]``, or written into ``out`` (float32 or the table's type) when
    given. An empty bag sums to zero."""
    count = len(offsets) - 1
    if out is None:
        out = np.empty((count, table.shape[1]), dtype=np.float32)
    if count == 0:
        return out
    if count < FEW_SENTENCES and "torch" not in sys.modules:
        few = _compiled_sums if optional_module(COMPILED_MODULE) else _numpy_sums
        few(table, ids, offsets, weights, out)
        return out
    global _reported
    name = backend()
    if _reported != name:  # (once a process, and again if it changes)
        _reported = name
        log.debug("sentence sums: %s", describe(name))
    IMPLEMENTATIONS[name][1](table, ids, offsets, weights, out)
    return out


def describe(name: str) -> str:
    """What the implementation ``name`` is, in a few words (``psp info``, ``-v`` logs)."""
    return {
        "torch": "torch's embedding_bag",
        "compiled": "the compiled loop (_sums.c), one thread",
        "scipy": "scipy's sparse product, one thread (the compiled loop was not built here)",
        "numpy": "a numpy loop (neither the compiled loop nor scipy is here)",
    }[name]


def set_threads(count: int | None) -> int | None:
    """Ask the sums for ``count`` threads (``None``: as if none were asked); returns what was
    asked before. More than one takes torch, imported for it where installed; one takes the
    compiled loop where built (and sets torch's count where torch is already imported)."""
    global _asked_threads
    previous, _asked_threads = _asked_threads, count
    torch = sys.modules.get("torch")
    if torch is None and count is not None and count > 1:
        torch = torch_module()
    if torch is not None:
        if not _torch_threads_before:
            _torch_threads_before.append(torch.get_num_threads())
        torch.set_num_threads(_torch_threads_before[0] if count is None else count)
    return previous
