"""One mega-batch of training: mine negatives once, then take a step per mini-batch."""

from __future__ import annotations

import math
import time
from collections import defaultdict
from collections.abc import Callable
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass, field

import numpy as np
import torch

from psp_core.tokenization.csr import TokenBatch
from psp_core.training.config import TrainConfig
from psp_core.training.data import PairBatch
from psp_core.training.distributed import DistributedContext
from psp_core.training.encoder import MeanEmbeddingEncoder
from psp_core.training.loss import margin_loss, nested_margin_loss
from psp_core.training.negative_mining import mine_hard_negatives, sentence_hashes
from psp_core.training.optim import TrainingOptimizer, clip_gradient_norm


class NonFiniteLossError(FloatingPointError):
    """The loss became NaN or infinite."""


@dataclass(frozen=True)
class StepSettings:
    batch_size: int
    margin: float
    grad_clip: float
    negatives_from: str
    mining_chunk_rows: int
    mining_screen: bool | None  # None: screen float32 mining with bfloat16 where it is fast
    device: torch.device
    # the prefixes the loss is summed over (Matryoshka); empty: the whole vector only
    loss_dims: tuple[int, ...] = ()
    # several processes: gradients and the loss are averaged over the ranks every step
    distributed: DistributedContext = field(default_factory=DistributedContext)
    # a mixed file: per group index, its mining rule ("opposite" | "any") and the key of the
    # pairs it mines among (groups with equal keys share candidates; equal keys, equal rules)
    group_rules: tuple[str, ...] = ()
    group_keys: tuple[int, ...] = ()

    @classmethod
    def from_config(
        cls, config: TrainConfig, *, device: torch.device, negatives_from: str, **more
    ) -> StepSettings:
        """The step settings of a :class:`TrainConfig` (its mining precision as a screen
        choice); ``more``: ``distributed``, ``group_rules``, ``group_keys``."""
        return cls(
            batch_size=config.batch_size,
            margin=config.margin,
            grad_clip=config.grad_clip,
            negatives_from=negatives_from,
            mining_chunk_rows=config.mining_chunk_rows,
            mining_screen=False if config.mining_dtype == "float32-plain" else None,
            device=device,
            loss_dims=config.matryoshka_dims or (),
            **more,
        )


class PhaseTimes:
    """Seconds spent per phase of :func:`train_megabatch`, summed over calls (what
    ``benchmarks/train_profile.py`` reports): ``encode`` (the mega-batch's embeddings for
    mining), ``hashes``, ``mine``, ``assemble`` (a mini-batch's ids with its negatives),
    ``forward``, ``backward``, ``optimizer`` (clipping and the step)."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = defaultdict(float)

    @contextmanager
    def phase(self, name: str):
        started = time.perf_counter()
        try:
            yield
        finally:
            self.seconds[name] += time.perf_counter() - started


def encode(model: MeanEmbeddingEncoder, batch: TokenBatch, device: torch.device) -> torch.Tensor:
    ids = torch.from_numpy(batch.ids).to(device, non_blocking=True)
    offsets = torch.from_numpy(batch.offsets).to(device, non_blocking=True)
    return model(ids, offsets)


def _hashes(batch: TokenBatch, device: torch.device) -> torch.Tensor:
    return torch.from_numpy(sentence_hashes(batch.ids, batch.offsets)).to(device)


def _mine(settings: StepSettings, rule: str, *embeddings_and_hashes: torch.Tensor):
    return mine_hard_negatives(
        *embeddings_and_hashes,
        negatives_from=rule,
        chunk_rows=settings.mining_chunk_rows,
        screen=settings.mining_screen,
    )


def _mine_by_group(
    mega: PairBatch,
    settings: StepSettings,
    source_embeddings: torch.Tensor,
    target_embeddings: torch.Tensor,
    source_hashes: torch.Tensor,
    target_hashes: torch.Tensor,
) -> tuple[np.ndarray, np.ndarray]:
    """Negatives of a mixed mega-batch: each set of pairs with the same mining key mines among
    itself with its rule. Returns, per pair, the negative's row in the pooled ``[sources;
    targets]`` of the whole mega-batch (-1: none), for its source and for its target."""
    n = len(mega)
    keys = np.asarray(settings.group_keys, dtype=np.int64)[mega.group]
    for_source = np.full(n, -1, dtype=np.int64)
    for_target = np.full(n, -1, dtype=np.int64)
    for key in np.unique(keys):
        rows = np.flatnonzero(keys == key)
        rule = settings.group_rules[int(mega.group[rows[0]])]
        index = torch.from_numpy(rows).to(source_embeddings.device)
        negatives = _mine(
            settings,
            rule,
            source_embeddings.index_select(0, index),
            target_embeddings.index_select(0, index),
            source_hashes.index_select(0, index),
            target_hashes.index_select(0, index),
        )
        # the rule's pool (targets, sources, or both pooled) as rows of the mega-batch's pool
        if rule == "opposite":
            pool_of_source, pool_of_target = n + rows, rows
        else:
            pool_of_source = pool_of_target = np.concatenate([rows, n + rows])
        chosen_s = negatives.for_source.cpu().numpy()
        chosen_t = negatives.for_target.cpu().numpy()
        for_source[rows] = np.where(chosen_s >= 0, pool_of_source[np.maximum(chosen_s, 0)], -1)
        for_target[rows] = np.where(chosen_t >= 0, pool_of_target[np.maximum(chosen_t, 0)], -1)
    return for_source, for_target


def train_megabatch(
    model: MeanEmbeddingEncoder,
    optimizer: TrainingOptimizer,
    mega: PairBatch,
    settings: StepSettings,
    *,
    first_step: int,
    on_step: Callable[[int, float], None] | None = None,
    times: PhaseTimes | None = None,
) -> list[float]:
    """Train on one mega-batch; returns the loss of each mini-batch.

    Negatives are mined once, with the parameters as they are at the start of the mega-batch
    and without dropout, then every mini-batch takes one optimizer step. Under several
    processes every rank calls this with its own shard, all with the same number of
    mini-batches; the losses returned are the means over the ranks.
    """
    device = settings.device
    distributed = settings.distributed
    phase = times.phase if times is not None else (lambda _name: nullcontext())
    model.eval()
    with torch.no_grad(), phase("encode"):
        source_embeddings = encode(model, mega.source, device)
        target_embeddings = encode(model, mega.target, device)
    with phase("hashes"):
        source_hashes = _hashes(mega.source, device)
        target_hashes = _hashes(mega.target, device)
    with phase("mine"):
        for_source, for_target, pool_for_source, pool_for_target = _negatives(
            mega,
            settings,
            source_embeddings,
            target_embeddings,
            source_hashes,
            target_hashes,
        )
    del source_embeddings, target_embeddings

    model.train()
    params = list(model.parameters())
    losses = []
    for start in range(0, len(mega), settings.batch_size):
        stop = min(start + settings.batch_size, len(mega))
        n = stop - start
        t_negative_rows, s_negative_rows = for_source[start:stop], for_target[start:stop]
        with phase("assemble"):
            joined = TokenBatch.concat(
                [
                    mega.source.slice(start, stop),
                    mega.target.slice(start, stop),
                    pool_for_source.take(np.maximum(t_negative_rows, 0)),
                    pool_for_target.take(np.maximum(s_negative_rows, 0)),
                ]
            )
            ids = torch.from_numpy(joined.ids).to(device)
            offsets = torch.from_numpy(joined.offsets).to(device)
        with phase("forward"):
            optimizer.zero_grad(set_to_none=True)
            loss, rows, unique = _forward(
                model, settings, ids, offsets, n, t_negative_rows, s_negative_rows
            )
            value = distributed.mean(loss.detach()).item()
        step = first_step + len(losses) + 1
        if not math.isfinite(value):
            raise NonFiniteLossError(
                f"training loss is {value} at step {step}; lower the learning rate or check the "
                "training data"
            )
        with phase("backward"):
            loss.backward()
            if model.sparse:
                grad_ids, grad_rows = distributed.average_sparse(unique, rows.grad)
                model.weight.grad = torch.sparse_coo_tensor(
                    grad_ids.unsqueeze(0),
                    grad_rows,
                    model.weight.shape,
                    is_coalesced=True,
                    check_invariants=False,
                )
            else:
                distributed.average_dense_(model.weight.grad)
        with phase("optimizer"):
            clip_gradient_norm(params, settings.grad_clip)
            optimizer.step()
        losses.append(value)
        if on_step is not None:
            on_step(step, value)
    return losses


def _negatives(mega, settings, source_embeddings, target_embeddings, source_hashes, target_hashes):
    """Each pair's negatives (rows of the pools returned) for its source and its target."""
    if mega.group is not None:
        for_source, for_target = _mine_by_group(
            mega, settings, source_embeddings, target_embeddings, source_hashes, target_hashes
        )
        pool_for_source = pool_for_target = TokenBatch.concat([mega.source, mega.target])
        return for_source, for_target, pool_for_source, pool_for_target
    negatives = _mine(
        settings,
        settings.negatives_from,
        source_embeddings,
        target_embeddings,
        source_hashes,
        target_hashes,
    )
    if settings.negatives_from == "opposite":
        pool_for_source, pool_for_target = mega.target, mega.source
    else:
        pool_for_source = pool_for_target = TokenBatch.concat([mega.source, mega.target])
    for_source = negatives.for_source.cpu().numpy()
    for_target = negatives.for_target.cpu().numpy()
    return for_source, for_target, pool_for_source, pool_for_target


def _forward(model, settings, ids, offsets, n, t_negative_rows, s_negative_rows):
    """The mini-batch's loss; with the sparse optimizer also the gathered rows and their ids."""
    device = settings.device
    rows = unique = None
    if model.sparse:
        # one gradient row per distinct piece, not one per token
        unique, local = torch.unique(ids, return_inverse=True)
        rows = model.weight.detach().index_select(0, unique).requires_grad_()
        embeddings = model.forward_rows(rows, local, offsets)
    else:
        embeddings = model(ids, offsets)
    s, t, t_negative, s_negative = embeddings.split(n)
    if (t_negative_rows < 0).any() or (s_negative_rows < 0).any():
        t_negative = t_negative * torch.from_numpy(t_negative_rows >= 0).to(device).unsqueeze(1)
        s_negative = s_negative * torch.from_numpy(s_negative_rows >= 0).to(device).unsqueeze(1)
    if settings.loss_dims:
        loss = nested_margin_loss(s, t, t_negative, s_negative, settings.loss_dims, settings.margin)
    else:
        loss = margin_loss(s, t, t_negative, s_negative, settings.margin)
    return loss, rows, unique
