"""Ratio-margin scoring and mining (Artetxe and Schwenk, 2019).

"Margin-based Parallel Corpus Mining with Multilingual Sentence Embeddings" (ACL 2019)::

    score(x, y) = cos(x, y) / ( sum_{z in NN_k(x)} cos(x, z) / 2k + sum_{z in NN_k(y)} cos(y, z) / 2k )

where ``NN_k(x)`` are the ``k`` nearest target sentences of source ``x`` and ``NN_k(y)`` the
``k`` nearest source sentences of target ``y``. Dividing by the neighbourhoods' mean similarity
penalises "hubs", sentences that are close to everything. As in LASER's ``mine_bitexts``, the
candidates of a sentence are its ``k`` nearest neighbours by cosine, rescored by margin.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import numpy as np

from psp_core.bitext_mining.search import DEFAULT_BLOCK_SIZE, check_pair, nearest_neighbours

log = logging.getLogger(__name__)

MODES = ("forward", "backward", "intersection")


@dataclass(frozen=True)
class Neighbourhoods:
    """Both directions' k-NN lists and each sentence's mean similarity to its neighbours."""

    forward_similarities: np.ndarray  # [n_src, k]: targets nearest each source
    forward_indices: np.ndarray
    backward_similarities: np.ndarray  # [n_tgt, k]: sources nearest each target
    backward_indices: np.ndarray

    @property
    def source_density(self) -> np.ndarray:
        """``mean_{z in NN_k(x)} cos(x, z)`` for every source ``x``."""
        return self.forward_similarities.mean(axis=1)

    @property
    def target_density(self) -> np.ndarray:
        return self.backward_similarities.mean(axis=1)


def neighbourhoods(
    source: np.ndarray,
    target: np.ndarray,
    k: int = 4,
    *,
    block_size: int = DEFAULT_BLOCK_SIZE,
    backend: str = "auto",
) -> Neighbourhoods:
    """Run the two k-NN searches (source -> target and target -> source) margin scoring needs."""
    forward = nearest_neighbours(source, target, k, block_size=block_size, backend=backend)
    backward = nearest_neighbours(target, source, k, block_size=block_size, backend=backend)
    return Neighbourhoods(*forward, *backward)


def _margin(similarities, own_density, other_density_of_candidates) -> np.ndarray:
    denominator = (own_density[:, None] + other_density_of_candidates) / 2.0
    return similarities / np.maximum(denominator, 1e-6)


def margin_best(hoods: Neighbourhoods, direction: str = "forward") -> tuple[np.ndarray, np.ndarray]:
    """For every source (``forward``) or target (``backward``) sentence, the candidate among its
    k nearest neighbours with the highest ratio margin; returns ``(indices, scores)``."""
    if direction == "forward":
        sims, idx = hoods.forward_similarities, hoods.forward_indices
        scores = _margin(sims, hoods.source_density, hoods.target_density[idx])
    elif direction == "backward":
        sims, idx = hoods.backward_similarities, hoods.backward_indices
        scores = _margin(sims, hoods.target_density, hoods.source_density[idx])
    else:
        raise ValueError(f"direction must be 'forward' or 'backward', got {direction!r}")
    if idx.shape[1] == 0:
        return np.empty(0, dtype=np.int64), np.empty(0, dtype=np.float32)
    choice = scores.argmax(axis=1)
    rows = np.arange(len(idx))
    return idx[rows, choice], scores[rows, choice].astype(np.float32)


@dataclass(frozen=True)
class MinedPairs:
    """Mined pairs, sorted by decreasing margin score."""

    scores: np.ndarray  # float32
    source_indices: np.ndarray  # int64
    target_indices: np.ndarray  # int64

    def __len__(self) -> int:
        return len(self.scores)


def mine(
    source: np.ndarray,
    target: np.ndarray,
    *,
    k: int = 4,
    mode: str = "intersection",
    threshold: float | None = None,
    block_size: int = DEFAULT_BLOCK_SIZE,
    backend: str = "auto",
) -> MinedPairs:
    """Mine translation pairs between two sets of embeddings by ratio margin.

    Args:
        source: ``[n, dim]`` source sentence embeddings.
        target: ``[m, dim]`` target sentence embeddings.
        k: neighbourhood size for the margin (and number of candidates per sentence).
        mode: ``forward`` (best target for every source), ``backward`` (best source for every
            target) or ``intersection`` (pairs that are both).
        threshold: keep pairs scoring at least this (ratio margins near 1 mean "no better than
            the neighbourhood"; LASER's mining used thresholds around 1.04-1.06).
        block_size, backend: see :func:`nearest_neighbours`.

    Empty sentences (all-zero embeddings) are never part of a mined pair.
    """
    if mode not in MODES:
        raise ValueError(f"unknown mining mode {mode!r}; expected one of {MODES}")
    check_pair(source, target, k, block_size)
    if len(source) == 0 or len(target) == 0:
        empty = np.empty(0, dtype=np.int64)
        return MinedPairs(np.empty(0, dtype=np.float32), empty, empty.copy())
    hoods = neighbourhoods(source, target, k, block_size=block_size, backend=backend)
    if mode == "backward":
        src, scores = margin_best(hoods, "backward")
        tgt = np.arange(len(target))
    else:
        tgt, scores = margin_best(hoods, "forward")
        src = np.arange(len(source))
        if mode == "intersection":  # the margin is symmetric: forward score = backward score
            source_of, _ = margin_best(hoods, "backward")
            keep = source_of[tgt] == src
            src, tgt, scores = src[keep], tgt[keep], scores[keep]
    valid = _nonzero_rows(source)[src] & _nonzero_rows(target)[tgt]
    if threshold is not None:
        valid &= scores >= threshold
    src, tgt, scores = src[valid], tgt[valid], scores[valid]
    order = np.lexsort((tgt, src, -scores))
    log.info("mined %d pairs (%s, k=%d, threshold=%s)", len(order), mode, k, threshold)
    return MinedPairs(
        scores[order].astype(np.float32), src[order].astype(np.int64), tgt[order].astype(np.int64)
    )


def _nonzero_rows(array: np.ndarray, block_size: int = DEFAULT_BLOCK_SIZE) -> np.ndarray:
    result = np.empty(len(array), dtype=bool)
    for start in range(0, len(array), block_size):
        block = np.asarray(array[start : start + block_size])
        result[start : start + len(block)] = np.any(block != 0, axis=1)
    return result


def retrieve(
    queries: np.ndarray,
    keys: np.ndarray,
    *,
    method: str = "cosine",
    k: int = 4,
    block_size: int = DEFAULT_BLOCK_SIZE,
    backend: str = "auto",
) -> np.ndarray:
    """Index of the best key for every query, by ``cosine`` or by ratio ``margin``."""
    if method == "cosine":
        _, indices = nearest_neighbours(queries, keys, 1, block_size=block_size, backend=backend)
        return indices[:, 0]
    if method == "margin":
        hoods = neighbourhoods(queries, keys, k, block_size=block_size, backend=backend)
        return margin_best(hoods, "forward")[0]
    raise ValueError(f"unknown retrieval method {method!r}; expected 'cosine' or 'margin'")
