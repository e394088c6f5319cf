"""Remembered candidates in training (``TrainConfig.mining_candidates``): each full mega-batch
keeps its pairs from epoch to epoch, is mined exactly once with its ``k`` best candidates per
anchor remembered, and in later epochs takes its negatives from them while a sample of its
anchors mined exactly agrees (:mod:`psp_core.training.candidate_mining`).

The lists live in ``candidates.npy`` in the checkpoint directory, one row per pair position of
the epoch (a memory map: memory holds one mega-batch's lists; 2 x k int16 per pair). Which
mega-batches have lists, and from which epoch, is part of the checkpoint's state
(``TrainingState.candidate_slots``).
Rows are written only by exact mining, which a resumed run repeats with the same parameters, so
lists written after the last checkpoint by a killed run are the ones the resumed run would
write; a missing or damaged file is started again (those mega-batches are mined exactly).
"""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np
import torch

from psp_core.training.candidate_mining import AGREEMENT, rescore, sampled_agreement, top_candidates
from psp_core.training.checkpoint import CANDIDATES_FILE
from psp_core.training.negative_mining import Negatives

log = logging.getLogger(__name__)

#: the per-epoch counters kept in ``TrainingState.epoch_mining``
COUNTERS = ("exact", "reused", "sampled", "agreeing", "failed")


class CandidateMemory:
    """The lists of one run, and the counters of the epoch.

    Args:
        directory: the checkpoint directory.
        k: candidates per anchor.
        slot_pairs: pairs of a full mega-batch (``max_megabatch x batch_size``).
        n_pairs: pairs per epoch.
        slots: ``TrainingState.candidate_slots`` (``{slot: [epoch, pairs]}``), updated in place.
        counters: ``TrainingState.epoch_mining``, updated in place.
        seed: seeds the sampled anchors (with the epoch and the slot).
    """

    def __init__(
        self,
        directory: Path,
        *,
        k: int,
        slot_pairs: int,
        n_pairs: int,
        slots: dict[str, list[int]],
        counters: dict[str, int],
        seed: int,
    ) -> None:
        self.k = k
        self.slot_pairs = slot_pairs
        self.n_pairs = n_pairs
        self.slots = slots
        self.counters = counters
        self.seed = seed
        n_slots = -(-n_pairs // slot_pairs)
        shape = (n_slots * slot_pairs, 2, k)
        # a candidate indexes its mega-batch's pool (at most both sides): 2 bytes suffice for
        # the paper's 12,800 pairs, halving the file (1.3 GB at k 32 for 10M pairs)
        dtype = np.int16 if 2 * slot_pairs <= np.iinfo(np.int16).max else np.int32
        path = Path(directory) / CANDIDATES_FILE
        self.lists = None
        if path.is_file() and slots:
            try:
                lists = np.load(path, mmap_mode="r+")
                if lists.shape == shape and lists.dtype == dtype:
                    self.lists = lists
            except (OSError, ValueError) as error:
                log.warning(
                    "remembered candidates in %s unreadable (%s): starting again", path, error
                )
        if self.lists is None:
            if slots:
                log.warning(
                    "remembered candidates in %s missing: mining those mega-batches again", path
                )
            slots.clear()
            path.parent.mkdir(parents=True, exist_ok=True)
            self.lists = np.lib.format.open_memmap(path, mode="w+", dtype=dtype, shape=shape)

    def slot_of(self, position: int, pairs: int) -> int | None:
        """The slot of the mega-batch of ``pairs`` pairs that starts at ``position`` in the
        epoch: full mega-batches (and the epoch's last) have one; annealed ones do not."""
        if position % self.slot_pairs or not (
            pairs == self.slot_pairs or position + pairs == self.n_pairs
        ):
            return None
        return position // self.slot_pairs

    def order(self, slot: int | None, epoch: int, pairs: int) -> np.ndarray | None:
        """The mini-batches' order inside a kept mega-batch: new every epoch after the first."""
        if slot is None or epoch == 0:
            return None
        return np.random.default_rng([self.seed, epoch, slot]).permutation(pairs)

    def miner(self, slot: int, epoch: int, negatives_from: str, chunk_rows: int):
        """The ``steps.train_megabatch`` miner of the mega-batch in ``slot`` this epoch."""

        def mine(source, target, source_hash, target_hash) -> Negatives:
            pairs = len(source)
            low = slot * self.slot_pairs
            recorded = self.slots.get(str(slot))
            args = (source, target, source_hash, target_hash)
            if recorded is not None and recorded[1] == pairs and recorded[0] < epoch:
                lists = self._read(low, pairs, len(target), negatives_from, source.device)
                if lists is not None:
                    check = sampled_agreement(
                        *args,
                        lists,
                        negatives_from=negatives_from,
                        generator=np.random.default_rng([self.seed, epoch, slot, 1]),
                    )
                    if check.agreement < AGREEMENT:
                        self.counters["failed"] += 1
                    else:
                        # what the re-used lists gave, checked on the sample
                        self.counters["sampled"] += check.sampled
                        self.counters["agreeing"] += check.agreeing
                        chosen = rescore(*args, lists, negatives_from=negatives_from)
                        # the sampled anchors were mined exactly: theirs are the exact ones
                        for found, rows, exact in zip(
                            (chosen.for_source, chosen.for_target),
                            check.rows,
                            check.exact,
                            strict=True,
                        ):
                            found[rows] = exact
                        self.counters["reused"] += 1
                        return chosen
            for_source, for_target = top_candidates(
                *args, negatives_from=negatives_from, k=self.k, chunk_rows=chunk_rows
            )
            self.lists[low : low + pairs, 0] = for_source.cpu().numpy()
            self.lists[low : low + pairs, 1] = for_target.cpu().numpy()
            self.slots[str(slot)] = [epoch, pairs]
            self.counters["exact"] += 1
            return Negatives(for_source[:, 0].clone(), for_target[:, 0].clone())

        return mine

    def _read(self, low, pairs, n_target, negatives_from, device):
        """A slot's lists as tensors, or None where they are damaged (an index outside the
        pools, or a candidate listed twice for one anchor)."""
        lists = np.asarray(self.lists[low : low + pairs])
        pool = (n_target, pairs) if negatives_from == "opposite" else (2 * pairs, 2 * pairs)
        for side in (0, 1):
            if lists[:, side].min(initial=-1) < -1 or lists[:, side].max(initial=-1) >= pool[side]:
                return None
        ordered = np.sort(lists, axis=2)
        if ((ordered[..., 1:] == ordered[..., :-1]) & (ordered[..., 1:] >= 0)).any():
            return None
        return (
            torch.from_numpy(np.ascontiguousarray(lists[:, 0])).long().to(device),
            torch.from_numpy(np.ascontiguousarray(lists[:, 1])).long().to(device),
        )

    def flush(self) -> None:
        self.lists.flush()


def mining_record(counters: dict[str, int]) -> dict | None:
    """The epoch record's ``mining`` entry (None when no mega-batch had a slot): mega-batches
    mined exactly (``failed`` of them because their sample disagreed), mega-batches that
    re-used their lists, and the share of those mega-batches' sampled anchors whose re-used
    negative agreed with exact mining (within 0.01 cosine)."""
    if not counters or not (counters.get("exact") or counters.get("reused")):
        return None
    sampled = counters.get("sampled", 0)
    return {
        "exact": counters.get("exact", 0),
        "failed": counters.get("failed", 0),
        "reused": counters.get("reused", 0),
        "sampled_agreement": round(counters.get("agreeing", 0) / sampled, 4) if sampled else None,
    }
