"""Reading training pairs epoch by epoch, in bounded memory.

Pairs are stored shuffled, so each epoch reads blocks of ``block_size`` contiguous pairs. To vary
the order between epochs without holding the corpus, the block order and the order inside each
block are permuted with a generator seeded by ``(seed, epoch)``. An epoch's order is therefore a
pure function of the seed and the epoch, and a position inside it is one integer: the number of
pairs already consumed, which is what a checkpoint stores.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from psp_core.tokenization.csr import TokenBatch
from psp_core.training.training_file import TrainingFile


@dataclass(frozen=True)
class PairBatch:
    source: TokenBatch
    target: TokenBatch
    #: each pair's group index (a file of several languages), else None
    group: np.ndarray | None = None

    def __len__(self) -> int:
        return len(self.source)

    def slice(self, start: int, stop: int) -> PairBatch:
        group = None if self.group is None else self.group[start:stop]
        return PairBatch(self.source.slice(start, stop), self.target.slice(start, stop), group)

    def take(self, rows: np.ndarray) -> PairBatch:
        group = None if self.group is None else self.group[rows]
        return PairBatch(self.source.take(rows), self.target.take(rows), group)

    @staticmethod
    def concat(batches: list[PairBatch]) -> PairBatch:
        groups = [b.group for b in batches]
        has_groups = bool(batches) and all(g is not None for g in groups)
        return PairBatch(
            TokenBatch.concat([b.source for b in batches]),
            TokenBatch.concat([b.target for b in batches]),
            np.concatenate(groups) if has_groups else None,
        )


class EpochStream:
    """The pairs of one epoch in its seeded order, handed out ``take(n)`` at a time.

    Args:
        data: the training file.
        seed, epoch: decide the order.
        block_size: pairs per shuffled block (memory holds about one block).
        start: pairs of this epoch already consumed (to resume).
    """

    def __init__(
        self, data: TrainingFile, *, seed: int, epoch: int, block_size: int, start: int = 0
    ) -> None:
        self.data = data
        self.block_size = block_size
        rng = np.random.default_rng([seed, epoch])
        n_blocks = -(-len(data) // block_size)
        self._block_order = rng.permutation(n_blocks)
        self._block_seeds = rng.integers(0, 2**63 - 1, size=n_blocks)
        self.position = 0
        self._buffer: PairBatch | None = None
        self._block_cursor = 0
        self._skip(start)

    def _load_block(self, slot: int) -> PairBatch:
        block = int(self._block_order[slot])
        low = block * self.block_size
        high = min(low + self.block_size, len(self.data))
        source, target = self.data.read(low, high)
        order = np.random.default_rng(int(self._block_seeds[slot])).permutation(high - low)
        return PairBatch(source, target, self.data.read_groups(low, high)).take(order)

    def _block_length(self, slot: int) -> int:
        low = int(self._block_order[slot]) * self.block_size
        return min(self.block_size, len(self.data) - low)

    def _skip(self, count: int) -> None:
        while (
            self._block_cursor < len(self._block_order)
            and self._block_length(self._block_cursor) <= count
        ):
            count -= self._block_length(self._block_cursor)
            self.position += self._block_length(self._block_cursor)
            self._block_cursor += 1
        while count > 0:
            taken = self.take(count)
            if len(taken) == 0:
                raise ValueError(f"cannot skip {count} more pairs: the epoch has ended")
            count -= len(taken)

    def take(self, count: int) -> PairBatch:
        """The next ``count`` pairs (fewer at the end of the epoch, empty after it)."""
        pieces: list[PairBatch] = []
        needed = count
        while needed > 0:
            if self._buffer is None or len(self._buffer) == 0:
                if self._block_cursor >= len(self._block_order):
                    break
                self._buffer = self._load_block(self._block_cursor)
                self._block_cursor += 1
                continue
            n = min(needed, len(self._buffer))
            buf = self._buffer
            pieces.append(buf.slice(0, n))
            self._buffer = buf.slice(n, len(buf))
            needed -= n
        batch = PairBatch.concat(pieces)
        self.position += len(batch)
        return batch
