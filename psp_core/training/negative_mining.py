"""Hard-negative mining over a mega-batch: one matrix product, processed in row chunks.

For each anchor the negative is the most cosine-similar candidate that is neither the anchor's
partner nor a sentence whose piece ids equal the anchor's or the partner's (so a duplicate of
the positive elsewhere in the mega-batch is never chosen). Identity of sentences is decided on
64-bit hashes of their id sequences.

* Bitext: negatives for source sentences come from the target side and vice versa. One product
  ``S @ T.T`` serves both: its row maxima are the sources' negatives and its column maxima the
  targets'.
* Paraphrase data: negatives come from any sentence of the mega-batch (both sides pooled). The
  pooled product ``A @ A.T`` (``A = [S; T]``) is symmetric, so only its upper triangle of blocks
  is computed and each block serves its rows and its columns: half the work of two products.

The excluded candidates are few (the partner plus exact duplicates), so they are listed once per
mega-batch as sparse ``(anchor, candidate)`` positions and written into each similarity block as
``-inf``, instead of comparing hash matrices block by block. Per block the work is the matrix
product plus one row and one column reduction.

Where bfloat16 products are fast, the products are bfloat16 and every candidate within a
rigorous error window of its anchor's best is re-scored in float32 (the screen): the float32
negatives, for little more than the bfloat16 product, well below the cost of float32 products
(benchmarks/RESULTS.md#train-profile).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F

NEGATIVE_SOURCES = ("opposite", "any")
#: Screening pays from about 1280 x 1280 similarities: below that the float32 product is faster
#: (on a CPU with AVX512-BF16; benchmarks/RESULTS.md#train-profile).
SCREEN_MIN_PRODUCT = 1280 * 1280

_GOLDEN = np.uint64(0x9E3779B97F4A7C15)


def _splitmix64(x: np.ndarray) -> np.ndarray:
    x = x + _GOLDEN
    x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return x ^ (x >> np.uint64(31))


def sentence_hashes(ids: np.ndarray, offsets: np.ndarray) -> np.ndarray:
    """64-bit hash of each sentence's id sequence (order-sensitive), as int64.

    Equal sequences always get equal hashes; different ones collide with probability ~2**-64.
    """
    ids = np.asarray(ids)
    offsets = np.asarray(offsets, dtype=np.int64)
    lengths = np.diff(offsets)
    with np.errstate(over="ignore"):
        positions = np.arange(len(ids), dtype=np.int64) - np.repeat(offsets[:-1], lengths)
        token_hash = _splitmix64(ids.astype(np.uint64) ^ (positions.astype(np.uint64) * _GOLDEN))
        cumulative = np.zeros(len(ids) + 1, dtype=np.uint64)
        np.cumsum(token_hash, out=cumulative[1:])
        sums = cumulative[offsets[1:]] - cumulative[offsets[:-1]]
        hashes = _splitmix64(sums ^ lengths.astype(np.uint64))
    return hashes.view(np.int64)


@dataclass(frozen=True)
class Negatives:
    """Indices of the chosen negatives.

    ``for_source[i]`` indexes the candidate pool of source sentence ``i`` (the target side for
    bitext, the pooled ``[sources; targets]`` for paraphrase data); ``for_target`` likewise. An
    index of -1 means no valid candidate existed (the trainer uses a zero vector then).
    """

    for_source: torch.Tensor
    for_target: torch.Tensor


def equal_hash_positions(
    anchor_keys: list[np.ndarray], pool_hash: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """All ``(anchor, candidate)`` with ``pool_hash[candidate] == keys[anchor]`` for any of the
    ``anchor_keys`` arrays (each ``[n_anchors]``), sorted by anchor. Vectorized: one sort of the
    pool and a ``searchsorted`` per key array."""
    order = np.argsort(pool_hash, kind="stable")
    sorted_hash = pool_hash[order]
    anchors, candidates = [], []
    for keys in anchor_keys:
        low = np.searchsorted(sorted_hash, keys, side="left")
        high = np.searchsorted(sorted_hash, keys, side="right")
        counts = high - low
        anchor = np.repeat(np.arange(len(keys), dtype=np.int64), counts)
        starts = np.repeat(low - np.cumsum(counts) + counts, counts)
        anchors.append(anchor)
        candidates.append(order[np.arange(len(anchor), dtype=np.int64) + starts])
    anchor = np.concatenate(anchors)
    candidate = np.concatenate(candidates)
    by_anchor = np.argsort(anchor, kind="stable")
    return anchor[by_anchor], candidate[by_anchor]


class Exclusions:
    """Excluded ``(anchor, candidate)`` positions (:func:`equal_hash_positions`' arrays, sorted
    by anchor) on ``device``, sliced by anchor range in O(log n)."""

    def __init__(self, anchor: np.ndarray, candidate: np.ndarray, device: torch.device) -> None:
        self._anchor_np = anchor
        self.anchor = torch.from_numpy(anchor).to(device)
        self.candidate = torch.from_numpy(candidate).to(device)

    def between(self, start: int, stop: int) -> tuple[torch.Tensor, torch.Tensor]:
        low, high = np.searchsorted(self._anchor_np, [start, stop])
        return self.anchor[low:high], self.candidate[low:high]


def _bf16_window(vectors: list[torch.Tensor], lows: list[torch.Tensor] | None = None) -> float:
    """How far below an anchor's best bfloat16 score a candidate may be and still be the
    float32 best, for unit vectors drawn from ``vectors`` (rigorous, not a tolerance).
    ``lows``: the vectors already rounded to bfloat16, if at hand.

    With ``a = ã + r_a`` (``ã`` the bfloat16 rounding, ``r_a`` its residual, computed exactly),
    ``|a.b - ã.b̃| <= |ã||r_b| + |r_a||b̃| + |r_a||r_b|``; the kernel accumulates in float32
    (``dim * 2**-24`` relative, Cauchy-Schwarz) and rounds its result to bfloat16 (at most
    ``2**-8 * |cos|``, ``|cos| <= 1``). Two scores are each off by at most that much, so the
    window is twice the sum. Typically about 0.015.
    """
    u = 2.0**-8
    lows = lows if lows is not None else [v.bfloat16() for v in vectors]
    norms, residuals = [], []
    for v, low in zip(vectors, lows, strict=True):
        for start in range(0, len(v), 1024):  # small pieces: no fresh pages for temporaries
            rounded = low[start : start + 1024].float()
            norms.append(torch.linalg.vector_norm(rounded, dim=1).amax())
            rounded.sub_(v[start : start + 1024])
            residuals.append(torch.linalg.vector_norm(rounded, dim=1).amax())
    norm, residual = float(torch.stack(norms).max()), float(torch.stack(residuals).max())
    dim = vectors[0].shape[1]
    error = 2 * norm * residual + residual**2 + dim * 2.0**-24 * norm * norm + u * 1.001
    return 2 * error * 1.001


class _Screen:
    """Collects every (anchor, candidate) whose bfloat16 score is within ``window`` of the
    anchor's best so far, so that the exact pass re-scores only those pairs in float32."""

    def __init__(self, window: float) -> None:
        self.window = window
        self.parts: list[tuple[torch.Tensor, torch.Tensor, torch.Tensor]] = []

    def mark(self, view, anchor_start, candidate_start, best_values) -> None:
        threshold = best_values - self.window
        threshold = torch.nextafter(  # rounded down: the collected set may only grow
            threshold.to(view.dtype), torch.tensor(float("-inf"), dtype=view.dtype)
        ).masked_fill_(torch.isneginf(threshold), float("inf"))
        rows, columns = _at_least(view, threshold)
        self.parts.append(
            (rows + anchor_start, columns + candidate_start, view[rows, columns].float())
        )

    def resolve(
        self, anchors: torch.Tensor, pool: torch.Tensor, best: _RunningBest, pieces: int = 1024
    ) -> torch.Tensor:
        """The float32 best collected candidate of every anchor (-1: none). Pairs collected
        against a running best that later rose are dropped first (they cannot win); an anchor
        left with one candidate has it as its best, the others are re-scored in float32, in
        pieces gathered into the same two buffers (fresh large buffers cost a page fault per
        4 KB, more than the products)."""
        anchor, candidate, approximate = (torch.cat(c) for c in zip(*self.parts, strict=True))
        keep = approximate >= best.value[anchor] - self.window
        anchor, candidate = anchor[keep], candidate[keep]
        n = len(anchors)
        result = torch.full((n,), -1, dtype=torch.long, device=anchors.device)
        counts = torch.bincount(anchor, minlength=n)
        alone = counts[anchor] == 1
        result[anchor[alone]] = candidate[alone]
        anchor, candidate = anchor[~alone], candidate[~alone]
        exact = anchors.new_empty(len(anchor))
        left = anchors.new_empty(min(pieces, len(anchor)), anchors.shape[1])
        right = torch.empty_like(left)
        for i in range(0, len(anchor), pieces):
            size = min(pieces, len(anchor) - i)
            torch.index_select(anchors, 0, anchor[i : i + size], out=left[:size])
            torch.index_select(pool, 0, candidate[i : i + size], out=right[:size])
            exact[i : i + size] = torch.linalg.vecdot(left[:size], right[:size])
        top = torch.full((n,), float("-inf"), device=anchors.device)
        top = top.scatter_reduce(0, anchor, exact, reduce="amax")
        at_top = exact == top[anchor]
        tied = torch.full((n,), len(pool), dtype=torch.long, device=anchors.device)
        tied = tied.scatter_reduce(0, anchor[at_top], candidate[at_top], reduce="amin")
        return torch.where(tied < len(pool), tied, result)


#: candidates per group in :func:`_at_least`
_GROUP = 64


def _at_least(view: torch.Tensor, threshold: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Positions ``(rows, columns)`` where ``view >= threshold[:, None]`` (in any order).

    For a bfloat16 ``view`` whose thresholds are all positive, the values are compared as int16
    bit patterns (their order is the values' order there; negative values, -inf included, have
    negative bits), and a group of 64 candidates is looked at only where its maximum reaches
    the threshold: a few groups of each row, where comparing every value would cost as much as
    the rest of the screen. ``view`` is a block or a block's transpose; the groups are made
    along memory so that their maxima are reductions of whole rows of the block.
    """
    if view.dtype != torch.bfloat16 or not bool((threshold.view(torch.int16) > 0).all()):
        return (view >= threshold.unsqueeze(1)).nonzero(as_tuple=True)
    bits, limit = view.view(torch.int16), threshold.view(torch.int16)
    whole = bits.shape[1] // _GROUP * _GROUP
    if bits.stride(1) == 1:  # candidates along rows: group g holds g, g + width, g + 2 width...
        width = whole // _GROUP
        groups = bits[:, :whole].unflatten(1, (_GROUP, width))
        row, group = (groups.amax(dim=1) >= limit.unsqueeze(1)).nonzero(as_tuple=True)
        values = groups[row, :, group]
        hit, member = (values >= limit[row].unsqueeze(1)).nonzero(as_tuple=True)
        column = member * width + group[hit]
    else:  # a transposed block (any other layout too, slower): group g holds g * 64 ... + 63
        groups = bits[:, :whole].t().unflatten(0, (-1, _GROUP))  # [group, member, anchor]
        group, row = (groups.amax(dim=1) >= limit.unsqueeze(0)).nonzero(as_tuple=True)
        values = groups[group, :, row]
        hit, member = (values >= limit[row].unsqueeze(1)).nonzero(as_tuple=True)
        column = group[hit] * _GROUP + member
    tail_row, tail_column = (bits[:, whole:] >= limit.unsqueeze(1)).nonzero(as_tuple=True)
    return torch.cat([row[hit], tail_row]), torch.cat([column, tail_column + whole])


def _row_maxima(view: torch.Tensor) -> torch.Tensor:
    """Each row's largest value as float32. For bfloat16, the maxima of the int16 bit patterns:
    the same wherever a row's maximum is positive; the other rows (negative values only, or
    -inf beside negative values, whose bits compare the other way) are redone as bfloat16."""
    if view.dtype != torch.bfloat16:
        return view.amax(dim=1).float()
    top = view.view(torch.int16).amax(dim=1)
    result = top.view(torch.bfloat16).float()
    unsure = top <= 0
    if bool(unsure.any()):
        rows = unsure.nonzero().squeeze(1)
        result[rows] = view[rows].amax(dim=1).float()
    return result


class _RunningBest:
    """Best candidate so far for each anchor, merged block by block (first-seen wins ties)."""

    def __init__(self, n: int, device: torch.device) -> None:
        self.value = torch.full((n,), float("-inf"), device=device)
        self.index = torch.full((n,), -1, dtype=torch.long, device=device)

    def merge(self, start: int, value: torch.Tensor, index: torch.Tensor) -> None:
        stop = start + len(value)
        value = value.float()
        better = value > self.value[start:stop]
        self.value[start:stop] = torch.where(better, value, self.value[start:stop])
        self.index[start:stop] = torch.where(better, index, self.index[start:stop])

    def raise_to(self, start: int, value: torch.Tensor) -> None:
        """Merge values only (the screen tracks its candidates itself)."""
        current = self.value[start : start + len(value)]
        torch.maximum(current, value, out=current)

    def result(self) -> torch.Tensor:
        return self.index.masked_fill(torch.isneginf(self.value), -1)


def _scan(
    view: torch.Tensor,
    anchor_start: int,
    candidate_start: int,
    exclusions: Exclusions,
    best: _RunningBest,
    screen: _Screen | None,
) -> None:
    """Fold one similarity block into ``best``: rows of ``view`` are anchors from
    ``anchor_start``, columns candidates from ``candidate_start`` (``view`` may be a transposed
    block). Excluded positions are hidden as -inf and restored afterwards, so the same block can
    be scanned again by columns."""
    with hiding_exclusions(view, anchor_start, candidate_start, exclusions):
        if screen is None:
            value, chosen = view.max(dim=1)
            best.merge(anchor_start, value, chosen + candidate_start)
        else:  # the screen finds the candidates itself: only the best values are needed
            n_anchors = view.shape[0]
            best.raise_to(anchor_start, _row_maxima(view))
            screen.mark(view, anchor_start, candidate_start, best.value[anchor_start:][:n_anchors])


@contextmanager
def hiding_exclusions(
    view: torch.Tensor, anchor_start: int, candidate_start: int, exclusions: Exclusions
) -> Iterator[None]:
    """Inside the block, ``view``'s excluded positions (rows: anchors from ``anchor_start``,
    columns: candidates from ``candidate_start``) read -inf; their values come back after, so
    the same block can be scanned again by columns."""
    n_anchors, n_candidates = view.shape
    anchor, candidate = exclusions.between(anchor_start, anchor_start + n_anchors)
    inside = (candidate >= candidate_start) & (candidate < candidate_start + n_candidates)
    index = (anchor[inside] - anchor_start, candidate[inside] - candidate_start)
    saved = view[index]
    view[index] = float("-inf")
    try:
        yield
    finally:
        view[index] = saved


def _hardest_bitext(source, target, source_hash, target_hash, chunk_rows, screen):
    """Row and column maxima of ``source @ target.T`` under each side's exclusions."""
    n = len(source)
    device = source.device
    # a source anchor must not get a target equal to itself or to its partner (or a copy of it)
    for_rows = Exclusions(*equal_hash_positions([source_hash, target_hash], target_hash), device)
    # a target anchor must not get a source equal to itself or to its partner (or a copy of it)
    for_cols = Exclusions(*equal_hash_positions([target_hash, source_hash], source_hash), device)
    rows, cols = _RunningBest(n, device), _RunningBest(len(target), device)
    row_screen = col_screen = None
    low_source, low_target = source, target
    if screen:
        low_source, low_target = source.bfloat16(), target.bfloat16()
        window = _bf16_window([source, target], [low_source, low_target])
        row_screen, col_screen = _Screen(window), _Screen(window)
    low_target_t = low_target.t()
    for start in range(0, n, chunk_rows):
        stop = min(start + chunk_rows, n)
        block = low_source[start:stop] @ low_target_t
        _scan(block, start, 0, for_rows, rows, row_screen)
        _scan(block.t(), 0, start, for_cols, cols, col_screen)
    if not screen:
        return rows.result(), cols.result()
    return (
        row_screen.resolve(source, target, rows),
        col_screen.resolve(target, source, cols),
    )


def _hardest_pooled(pool, pool_hash, partner_hash, chunk_rows, screen):
    """For every row of the symmetric ``pool @ pool.T``, the best column under the row's
    exclusions, computing only blocks on or right of the diagonal."""
    n = len(pool)
    device = pool.device
    exclusions = Exclusions(*equal_hash_positions([pool_hash, partner_hash], pool_hash), device)
    best = _RunningBest(n, device)
    low = pool.bfloat16() if screen else pool
    marks = _Screen(_bf16_window([pool], [low])) if screen else None
    for start in range(0, n, chunk_rows):
        stop = min(start + chunk_rows, n)
        block = low[start:stop] @ low[start:].t()  # rows start..stop, columns start..n
        _scan(block, start, start, exclusions, best, marks)
        # the same block read by columns: candidates start..stop for anchors start..n
        _scan(block.t(), start, start, exclusions, best, marks)
    return marks.resolve(pool, pool, best) if screen else best.result()


def fast_bfloat16_available(device: torch.device) -> bool:
    """Whether bfloat16 products are fast here (CPUs with AVX512-BF16/AMX via oneDNN)."""
    return device.type == "cpu" and bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())


@torch.no_grad()
def mine_hard_negatives(
    source: torch.Tensor,
    target: torch.Tensor,
    source_hash: torch.Tensor,
    target_hash: torch.Tensor,
    *,
    negatives_from: str = "opposite",
    chunk_rows: int = 512,
    dtype: torch.dtype = torch.float32,
    screen: bool | None = None,
) -> Negatives:
    """Pick the hardest negative for every source and target sentence of a mega-batch.

    Args:
        source, target: ``[n, dim]`` embeddings of the pairs' two sides (row ``i`` are partners).
        source_hash, target_hash: ``[n]`` int64 hashes from :func:`sentence_hashes`.
        negatives_from: ``"opposite"`` (bitext) or ``"any"`` (paraphrase data).
        chunk_rows: anchors per similarity block; peak memory is ``chunk_rows x pool`` values.
        dtype: ``torch.float32`` picks exactly the float32 hardest negatives;
            ``torch.bfloat16`` takes the best by bfloat16 products (faster, approximate: it may
            pick a candidate up to ~0.01 cosine below the hardest).
        screen: for ``float32``, screen with bfloat16 products and re-score in float32 every
            candidate that the error bound of :func:`_bf16_window` cannot rule out. The result is the same as a float32 product, at about the
            speed of a bfloat16 one. ``None``: screen where bfloat16 is fast
            (:func:`fast_bfloat16_available`) and the product has at least
            :data:`SCREEN_MIN_PRODUCT` entries.
    """
    if negatives_from not in NEGATIVE_SOURCES:
        raise ValueError(
            f"negatives_from must be one of {NEGATIVE_SOURCES}, got {negatives_from!r}"
        )
    if dtype not in (torch.float32, torch.bfloat16):
        raise ValueError(f"dtype must be torch.float32 or torch.bfloat16, got {dtype}")
    if screen is None:
        pool = len(target) if negatives_from == "opposite" else 2 * len(source)
        screen = (
            dtype == torch.float32
            and len(source) * pool >= SCREEN_MIN_PRODUCT
            and fast_bfloat16_available(source.device)
        )
    screen = screen and dtype == torch.float32
    source = F.normalize(source.float(), dim=1)
    target = F.normalize(target.float(), dim=1)
    if not screen:
        source, target = source.to(dtype), target.to(dtype)
    source_hash_np = source_hash.cpu().numpy()
    target_hash_np = target_hash.cpu().numpy()
    if negatives_from == "opposite":
        for_source, for_target = _hardest_bitext(
            source, target, source_hash_np, target_hash_np, chunk_rows, screen
        )
    else:
        n = len(source)
        pool_hash = np.concatenate([source_hash_np, target_hash_np])
        partner_hash = np.concatenate([target_hash_np, source_hash_np])
        best = _hardest_pooled(
            torch.cat([source, target]), pool_hash, partner_hash, chunk_rows, screen
        )
        for_source, for_target = best[:n], best[n:]
    return Negatives(for_source, for_target)
