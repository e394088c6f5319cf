"""Training hyperparameters, with the paper's defaults (and the reference code's where it is the
source: each attribute says which)."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from types import MappingProxyType
from typing import Any

OPTIMIZERS = ("sparse", "dense")


MINING_DTYPES = ("float32", "float32-plain")
#: how the learning rate moves over the run: held at ``lr``, or decayed linearly to 0
LR_DECAYS = ("constant", "linear")


@dataclass
class TrainConfig:
    """Everything that decides a training run.

    Attributes:
        dim: embedding dimension (paper: 1024).
        batch_size: pairs per mini-batch (paper: 128).
        max_megabatch: largest mega-batch, in mini-batches (paper: 100 for ParaNMT, 60 or 100
            for bitext).
        anneal_every: the mega-batch grows by one every this many mini-batches, starting at 1
            (paper: 150); 0 starts directly at ``max_megabatch``.
        margin: the loss margin ``d`` (paper: 0.4).
        dropout: dropout on piece embeddings while training (paper tunes 0.0, 0.1, 0.3).
        lr: Adam learning rate (paper: 0.001).
        lr_decay: ``"constant"`` (the paper's: ``lr`` throughout) or ``"linear"`` (from ``lr``
            at the first step down to 0 at the last of ``epochs``, so the number of epochs is
            part of the run and a resumed run must keep it).
        grad_clip: gradient-norm clip (5: the reference code's default, ``main.py --grad-clip``);
            0 disables it.
        epochs: passes over the data (paper: 25).
        seed: seeds initialisation, data order and both dropouts.
        optimizer: ``"sparse"`` (lazy Adam on sparse gradients: only rows seen in the batch are
            updated) or ``"dense"`` (exact Adam on the whole table, the paper's). Sparse is the
            default by measurement: nearly as good as dense per epoch and much faster, so
            better for the same training time (benchmarks/RESULTS.md#optimizer-compare).
        negatives_from: ``"opposite"`` (bitext), ``"any"`` (paraphrase) or ``None`` to follow
            the training file's ``kind`` (a mixed file: each pair's group's kind).
        checkpoint_every: save a checkpoint at the first mega-batch boundary after this many
            mini-batches (0: only at epoch ends).
        shuffle_block: pairs per block when reshuffling between epochs (bounded memory: block
            order and order within each block are permuted, seeded by ``seed`` and the epoch).
        mining_chunk_rows: rows per similarity block in negative mining (bounds memory).
        mining_dtype: ``"float32"``: exactly the float32 hardest negatives; on CPUs with fast
            bfloat16 (AVX512-BF16/AMX) they are found by screening with bfloat16 products and
            re-scoring the few candidates a rigorous error bound cannot rule out, faster than
            plain float32 products (benchmarks/RESULTS.md#mining-screen). ``"float32-plain"``:
            the same negatives from plain float32 products (the baseline the screen is
            measured and checked against).
        matryoshka_dims: train so that the first ``d`` dimensions of a vector work on their
            own for each ``d`` given (Matryoshka representation learning): the margin loss is
            summed over these nested prefixes, the full ``dim`` always included, e.g. ``(512,
            256, 128, 64)``. Negatives are mined with the full vectors. None: the paper's loss.
        max_steps: stop after this many mini-batches in total (None: run all epochs).
        device: ``"auto"`` (cuda if present, else cpu), ``"cpu"``, ``"cuda"``, ``"cuda:1"``...
        num_threads: torch intra-op threads (None: torch's default).
        log_every: log progress (loss, pairs/s, ETA) every this many mini-batches.
        log_seconds: and at least every this many seconds (0: by count only).
    """

    dim: int = 1024
    batch_size: int = 128
    max_megabatch: int = 100
    anneal_every: int = 150
    margin: float = 0.4
    dropout: float = 0.0
    lr: float = 0.001
    lr_decay: str = "constant"
    grad_clip: float = 5.0
    epochs: int = 25
    seed: int = 1
    optimizer: str = "sparse"
    negatives_from: str | None = None
    checkpoint_every: int = 1000
    shuffle_block: int = 100_000
    mining_chunk_rows: int = 512
    mining_dtype: str = "float32"
    matryoshka_dims: tuple[int, ...] | None = None
    max_steps: int | None = None
    device: str = "auto"
    num_threads: int | None = None
    log_every: int = 100
    log_seconds: float = 30.0

    def __post_init__(self) -> None:
        if self.optimizer not in OPTIMIZERS:
            raise ValueError(f"optimizer must be one of {OPTIMIZERS}, got {self.optimizer!r}")
        positive = ("dim", "batch_size", "max_megabatch", "epochs", "shuffle_block")
        for name in positive:
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        if self.mining_dtype not in MINING_DTYPES:
            raise ValueError(
                f"mining_dtype must be one of {MINING_DTYPES}, got {self.mining_dtype!r}"
            )
        if self.lr_decay not in LR_DECAYS:
            raise ValueError(f"lr_decay must be one of {LR_DECAYS}, got {self.lr_decay!r}")
        if self.anneal_every < 0 or self.checkpoint_every < 0:
            raise ValueError("anneal_every and checkpoint_every must be >= 0")
        if not 0.0 <= self.dropout < 1.0:
            raise ValueError(f"dropout must be in [0, 1), got {self.dropout}")
        if self.matryoshka_dims is not None:
            dims = tuple(int(d) for d in self.matryoshka_dims)
            if not dims or any(not 1 <= d <= self.dim for d in dims):
                raise ValueError(
                    f"matryoshka_dims must be dimensions in [1, dim={self.dim}], got {dims}"
                )
            # a canonical form, so that equal settings give equal fingerprints
            self.matryoshka_dims = tuple(sorted(set(dims) | {self.dim}, reverse=True))

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    # Fields that may change between a run and its resumption without changing the result.
    RESUMABLE_CHANGES = (
        "checkpoint_every",
        "max_steps",
        "device",
        "num_threads",
        "log_every",
        "log_seconds",
        "epochs",
    )

    # Fields added after checkpoints and models were made, with the value that trains as before:
    # a fingerprint of an earlier release that lacks one was made at that value.
    ADDED_LATER = MappingProxyType({"lr_decay": "constant"})

    # Fields removed since, with the only value they may hold in a checkpoint that can still be
    # resumed (the value that trained as the code does now); benchmarks/RESULTS.md#dropped
    # says why each went.
    REMOVED = MappingProxyType(
        {"mining_candidates": 0, "piece_dropout": 0.0, "negatives_within": "megabatch"}
    )
    # Of those, the ones every stage fingerprint made before their removal holds (they were
    # never left out at their neutral value), so they stay in it and an upgrade retrains nothing.
    STILL_FINGERPRINTED = ("negatives_within",)

    def stage_settings(self, leave_out: tuple[str, ...] = ()) -> dict[str, Any]:
        """The settings a pipeline stage records: every field but ``leave_out``, fields added
        later left out at the value that trains as before (so an upgrade retrains nothing)."""
        return {
            name: value
            for name, value in self.to_dict().items()
            if name not in leave_out and self.ADDED_LATER.get(name, object()) != value
        }

    @classmethod
    def removed_in_fingerprints(cls) -> dict[str, Any]:
        """What a stage fingerprint adds to :meth:`stage_settings` so that it stays the one
        earlier releases computed: the removed fields they always held, at their value."""
        return {name: cls.REMOVED[name] for name in cls.STILL_FINGERPRINTED}

    def fingerprint(self) -> dict[str, Any]:
        """The fields a checkpoint must agree on to be resumed, as JSON gives them back (a
        tuple is a list), since the checkpoint keeps them in JSON."""
        # a decaying learning rate depends on the run's length
        resumable = self.RESUMABLE_CHANGES
        if self.lr_decay != "constant":
            resumable = tuple(k for k in resumable if k != "epochs")
        fields = {k: v for k, v in self.to_dict().items() if k not in resumable}
        return json.loads(json.dumps(fields))
