"""Multi-process data-parallel training started by ``torchrun``.

Every process (rank) holds a full replica of the embedding table and the optimizer. All ranks
read the same epoch stream; each mega-batch step takes ``world_size`` local mega-batches from it
and rank ``r`` trains on the ``r``-th contiguous shard (mining negatives inside its shard). After
each backward pass the ranks average their gradients (sparse: all-gather of the touched rows,
then a sum per row; dense: all-reduce), so every rank applies the identical update and the
replicas stay identical without ever sending weights.

Outside ``torchrun`` (no ``WORLD_SIZE`` in the environment, or 1) the context is a single
process and none of this runs: training is exactly the single-process code path.
"""

from __future__ import annotations

import hashlib
import logging
import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class DistributedContext:
    """Where this process stands in a (possibly one-process) training run."""

    rank: int = 0
    world_size: int = 1
    local_rank: int = 0

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    @property
    def is_distributed(self) -> bool:
        return self.world_size > 1

    def barrier(self) -> None:
        """Wait until every rank gets here (no-op for one process)."""
        if self.is_distributed:
            dist.barrier()

    def broadcast_object(self, value: Any) -> Any:
        """Rank 0's ``value`` on every rank (a picklable object)."""
        if not self.is_distributed:
            return value
        holder = [value if self.is_main else None]
        dist.broadcast_object_list(holder, src=0)
        return holder[0]

    def mean(self, value: torch.Tensor) -> torch.Tensor:
        """The mean of a tensor over the ranks (a new tensor; the input is left alone)."""
        if not self.is_distributed:
            return value
        total = value.detach().clone()
        dist.all_reduce(total, op=dist.ReduceOp.SUM)
        return total / self.world_size

    def average_dense_(self, gradient: torch.Tensor) -> None:
        """Replace ``gradient`` in place by its mean over the ranks."""
        if self.is_distributed:
            dist.all_reduce(gradient, op=dist.ReduceOp.SUM)
            gradient.div_(self.world_size)

    def average_sparse(
        self, row_ids: torch.Tensor, rows: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Average a row-sparse gradient over the ranks.

        Args:
            row_ids: the distinct (unique) table rows this rank's gradient touches, int64 ``[k]``.
            rows: their gradient rows ``[k, dim]``.

        Returns:
            ``(ids, rows)``: the sorted distinct rows touched on any rank and, for each, the sum
            of the ranks' gradient rows divided by ``world_size`` (a row a rank did not touch
            counts as zero there): exactly the mean of the ranks' dense gradients. Every rank
            gets bit-identical results (the sum runs rank by rank in a fixed order).
        """
        if not self.is_distributed:
            return row_ids, rows
        ids_per_rank, rows_per_rank = _all_gather_varying(row_ids, rows, self.world_size)
        all_ids = torch.cat(ids_per_rank)
        unique, inverse = torch.unique(all_ids, sorted=True, return_inverse=True)
        summed = rows.new_zeros(len(unique), rows.shape[1])
        start = 0
        for ids_of_rank, rows_of_rank in zip(ids_per_rank, rows_per_rank, strict=True):
            stop = start + len(ids_of_rank)
            # ids are distinct within a rank, so no two additions of one call hit one row
            summed.index_add_(0, inverse[start:stop], rows_of_rank)
            start = stop
        return unique, summed.div_(self.world_size)


def _all_gather_varying(
    row_ids: torch.Tensor, rows: torch.Tensor, world_size: int
) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
    """All-gather ``row_ids`` / ``rows`` whose length differs between ranks.

    Collectives need equal sizes, so the counts go first and every rank pads to the largest.
    """
    count = torch.tensor([len(row_ids)], dtype=torch.int64, device=row_ids.device)
    counts = [torch.empty_like(count) for _ in range(world_size)]
    dist.all_gather(counts, count)
    sizes = [int(c.item()) for c in counts]
    largest = max(sizes)
    padded_ids = row_ids.new_zeros(largest)
    padded_ids[: len(row_ids)] = row_ids
    padded_rows = rows.new_zeros(largest, rows.shape[1])
    padded_rows[: len(rows)] = rows
    gathered_ids = [torch.empty_like(padded_ids) for _ in range(world_size)]
    gathered_rows = [torch.empty_like(padded_rows) for _ in range(world_size)]
    dist.all_gather(gathered_ids, padded_ids)
    dist.all_gather(gathered_rows, padded_rows)
    return (
        [ids[:size] for ids, size in zip(gathered_ids, sizes, strict=True)],
        [part[:size] for part, size in zip(gathered_rows, sizes, strict=True)],
    )


def _environment_int(name: str, default: int) -> int:
    value = os.environ.get(name)
    if value is None or value == "":
        return default
    try:
        return int(value)
    except ValueError:
        raise ValueError(f"environment variable {name}={value!r} must be an integer") from None


def context_from_environment() -> DistributedContext:
    """The context ``torchrun`` describes in ``WORLD_SIZE`` / ``RANK`` / ``LOCAL_RANK``."""
    world_size = _environment_int("WORLD_SIZE", 1)
    rank = _environment_int("RANK", 0)
    local_rank = _environment_int("LOCAL_RANK", 0)
    if world_size < 1 or not 0 <= rank < world_size:
        raise ValueError(
            f"RANK={rank} / WORLD_SIZE={world_size} from the environment are inconsistent; "
            "start multi-process training with torchrun"
        )
    return DistributedContext(rank=rank, world_size=world_size, local_rank=local_rank)


@contextmanager
def distributed_training(device: torch.device) -> Iterator[tuple[DistributedContext, torch.device]]:
    """Join the ``torchrun`` process group for the block; yields ``(context, device)``.

    Under ``torchrun`` with more than one process: the gloo backend on CPU, nccl on CUDA with
    this process on ``cuda:LOCAL_RANK``; the group is destroyed at the end (unless it was
    already initialised by the caller). Otherwise: one process and ``device`` unchanged.
    """
    context = context_from_environment()
    if not context.is_distributed:
        yield context, device
        return
    if device.type == "cuda":
        device = torch.device("cuda", context.local_rank)
        torch.cuda.set_device(device)
        backend = "nccl"
    elif device.type == "cpu":
        backend = "gloo"
    else:
        raise ValueError(f"multi-process training supports cpu and cuda devices, not {device}")
    owned = not dist.is_initialized()
    if owned:
        dist.init_process_group(backend=backend)
    log.info(
        "rank %d of %d on %s (%s backend)",
        context.rank,
        context.world_size,
        device,
        dist.get_backend(),
    )
    try:
        yield context, device
    finally:
        if owned:
            dist.destroy_process_group()


def tensor_digest(tensor: torch.Tensor) -> str:
    """sha256 of a tensor's bytes (to check that replicas agree)."""
    return hashlib.sha256(tensor.detach().cpu().contiguous().numpy().tobytes()).hexdigest()
