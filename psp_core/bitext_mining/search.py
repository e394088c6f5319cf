"""Exact k-nearest-neighbour search by cosine similarity, blocked so memory stays bounded.

Exact search runs as blocked matrix products in torch (``block_size`` rows of queries against
``block_size`` rows of keys at a time, keeping a running top-k), so memory is bounded whatever
the number of sentences; the embeddings may be ``np.memmap`` arrays. ``faiss`` (``faiss-cpu``) is
used instead when installed and ``backend="auto"`` or ``"faiss"`` is asked for; it is not a
dependency of this project.
"""

from __future__ import annotations

import logging

import numpy as np
import torch

log = logging.getLogger(__name__)

BACKENDS = ("auto", "torch", "faiss")
DEFAULT_BLOCK_SIZE = 4096
_EXCLUDED = -2.0  # below any cosine: what an empty (all-zero) key scores


def _faiss():
    try:
        import faiss
    except ImportError:
        return None
    return faiss


def resolve_backend(backend: str) -> str:
    """``auto`` gives ``faiss`` when it can be imported, else ``torch``."""
    if backend not in BACKENDS:
        raise ValueError(f"unknown search backend {backend!r}; expected one of {BACKENDS}")
    if backend == "torch":
        return "torch"
    if _faiss() is not None:
        return "faiss"
    if backend == "faiss":
        raise ValueError(
            "backend 'faiss' asked for but faiss is not installed (pip install faiss-cpu)"
        )
    return "torch"


def _unit_block(array: np.ndarray, start: int, stop: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Rows ``start:stop`` as unit-length float32 and a mask of the rows that are not all zero."""
    rows = np.ascontiguousarray(array[start:stop], dtype=np.float32)
    if not rows.flags.writeable:  # (a read-only or mapped input: torch takes writable arrays)
        rows = rows.copy()
    block = torch.from_numpy(rows)
    norms = block.norm(dim=1, keepdim=True)
    nonzero = norms[:, 0] > 0
    return block / norms.clamp_min(1e-12), nonzero


def check_pair(queries: np.ndarray, keys: np.ndarray, k: int, block_size: int) -> None:
    if queries.ndim != 2 or keys.ndim != 2 or queries.shape[1] != keys.shape[1]:
        raise ValueError(
            f"expected two 2-d arrays with the same width, got {queries.shape} and {keys.shape}"
        )
    if k < 1:
        raise ValueError(f"k must be >= 1, got {k}")
    if block_size < 1:
        raise ValueError(f"block_size must be >= 1, got {block_size}")


def nearest_neighbours(
    queries: np.ndarray,
    keys: np.ndarray,
    k: int,
    *,
    block_size: int = DEFAULT_BLOCK_SIZE,
    backend: str = "auto",
) -> tuple[np.ndarray, np.ndarray]:
    """The ``k`` nearest keys of every query by cosine similarity, most similar first.

    Args:
        queries: ``[n, dim]`` embeddings (any scale; normalized block by block).
        keys: ``[m, dim]`` embeddings. All-zero keys (empty sentences) are never returned while
            ``k`` non-empty keys exist.
        k: neighbours per query (clipped to ``m``).
        block_size: rows per block of queries and of keys (bounds memory at about
            ``block_size**2`` floats).
        backend: ``"torch"`` (exact, blocked), ``"faiss"`` or ``"auto"``.

    Returns:
        ``(similarities float32 [n, k], indices int64 [n, k])``.
    """
    check_pair(queries, keys, k, block_size)
    n, m = len(queries), len(keys)
    k = min(k, m)
    similarities = np.empty((n, k), dtype=np.float32)
    indices = np.empty((n, k), dtype=np.int64)
    if n == 0 or k == 0:
        return similarities, indices
    if resolve_backend(backend) == "faiss":
        return _faiss_neighbours(queries, keys, k, block_size)
    for q_start in range(0, n, block_size):
        q_stop = min(q_start + block_size, n)
        query_block, _ = _unit_block(queries, q_start, q_stop)
        best_values = torch.empty((q_stop - q_start, 0))
        best_indices = torch.empty((q_stop - q_start, 0), dtype=torch.int64)
        for k_start in range(0, m, block_size):
            key_block, nonzero = _unit_block(keys, k_start, min(k_start + block_size, m))
            scores = query_block @ key_block.T
            scores[:, ~nonzero] = _EXCLUDED
            top = torch.topk(scores, min(k, scores.shape[1]), dim=1)
            values = torch.cat([best_values, top.values], dim=1)
            candidates = torch.cat([best_indices, top.indices + k_start], dim=1)
            merged = torch.topk(values, min(k, values.shape[1]), dim=1)
            best_values = merged.values
            best_indices = torch.gather(candidates, 1, merged.indices)
        similarities[q_start:q_stop] = best_values.numpy()
        indices[q_start:q_stop] = best_indices.numpy()
    return similarities, indices


def _faiss_neighbours(
    queries: np.ndarray, keys: np.ndarray, k: int, block_size: int
) -> tuple[np.ndarray, np.ndarray]:
    faiss = _faiss()
    index = faiss.IndexFlatIP(keys.shape[1])
    for start in range(0, len(keys), block_size):
        block, nonzero = _unit_block(keys, start, min(start + block_size, len(keys)))
        block = block.numpy()
        block[~nonzero.numpy()] = 0.0  # cosine 0 instead of excluded: faiss has no mask
        index.add(block)
    similarities = np.empty((len(queries), k), dtype=np.float32)
    indices = np.empty((len(queries), k), dtype=np.int64)
    for start in range(0, len(queries), block_size):
        stop = min(start + block_size, len(queries))
        block, _ = _unit_block(queries, start, stop)
        similarities[start:stop], indices[start:stop] = index.search(block.numpy(), k)
    return similarities, indices
