"""The P-SP sentence encoder: the mean of a sentence's sentencepiece embeddings.

``g(s) = mean_i E[id_i]``, computed by ``nn.EmbeddingBag(mode="mean")`` over flat ids plus
offsets (no padding, no Python loop over sentences). One table is shared by both languages; it is
the model's only parameter.

Dropout (training only) is applied to the individual piece embeddings before the mean, as in the
reference implementation. EmbeddingBag returns only the mean, so with dropout > 0 the training
path gathers each token's row, zeroes the dropped values and averages with ``index_add_``, in
one autograd function (``_DroppedMean``) whose mask is drawn as 16-bit random integers (the
probability kept to 1/65,536): faster in training on a CPU than ``F.embedding`` +
``F.dropout``, whose Bernoulli draw per value dominates, with the same mean and gradient
(benchmarks/RESULTS.md#train-speed).

Piece dropout (training only) removes whole pieces from a sentence before the mean, each with
its probability, every sentence keeping at least one: the word dropout of deep averaging
networks (Iyyer et al., 2015), applied to sentencepiece pieces. It costs no speed (the mean
stays one ``embedding_bag``, over fewer pieces); off by default: on the dev suite it raises
English STS and lowers held-back retrieval (benchmarks/RESULTS.md#train-variants).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn


class MeanEmbeddingEncoder(nn.Module):
    """Mean-of-embeddings encoder over flat ids + offsets.

    Args:
        vocab_size: number of sentencepiece pieces.
        dim: embedding dimension (the paper uses 1024).
        dropout: dropout probability on piece embeddings while training.
        sparse: produce sparse gradients (for a lazy/sparse Adam).
    """

    def __init__(
        self,
        vocab_size: int,
        dim: int,
        *,
        dropout: float = 0.0,
        sparse: bool = False,
    ):
        super().__init__()
        if not 0.0 <= dropout < 1.0:
            raise ValueError(f"dropout must be in [0, 1), got {dropout}")
        self.bag = nn.EmbeddingBag(vocab_size, dim, mode="mean", sparse=sparse)
        self.dropout = dropout
        self.sparse = sparse

    @property
    def weight(self) -> nn.Parameter:
        return self.bag.weight

    @property
    def vocab_size(self) -> int:
        return self.bag.num_embeddings

    @property
    def dim(self) -> int:
        return self.bag.embedding_dim

    def reset_parameters(self, generator: torch.Generator | None = None) -> None:
        """Initialise the table from N(0, 1), like ``nn.Embedding``, from ``generator``."""
        with torch.no_grad():
            self.bag.weight.normal_(0.0, 1.0, generator=generator)

    def forward(self, ids: torch.Tensor, offsets: torch.Tensor) -> torch.Tensor:
        """Embed sentences given as flat ``ids`` and ``offsets`` (``n + 1`` entries, last = len)."""
        return self.forward_rows(self.bag.weight, ids, offsets, sparse=self.sparse)

    def forward_rows(
        self, rows: torch.Tensor, ids: torch.Tensor, offsets: torch.Tensor, *, sparse: bool = False
    ) -> torch.Tensor:
        """Embed sentences whose ``ids`` index into ``rows`` (a table or a gathered part of it).

        Training uses this with ``rows`` = the distinct rows a mini-batch touches, so the
        gradient has one row per distinct piece instead of one per token.
        """
        starts = offsets[:-1]
        if not (self.training and self.dropout > 0.0):
            return F.embedding_bag(ids, rows, starts, mode="mean", sparse=sparse)
        if sparse:  # the distinct rows, whose gradient reaches the table as a sparse tensor
            unique, ids = torch.unique(ids, return_inverse=True)
            rows = F.embedding(unique, rows, sparse=True)
        lengths = offsets[1:] - starts
        sentence_of = torch.repeat_interleave(
            torch.arange(len(lengths), device=ids.device), lengths
        )
        # each sentence's mean, scaled up for the values dropped
        scale = 1.0 / ((1.0 - self.dropout) * lengths.clamp(min=1).to(rows.dtype))
        return _DroppedMean.apply(
            rows, ids, sentence_of, scale, _drop_mask(ids, rows, self.dropout)
        )


def _drop_mask(ids: torch.Tensor, rows: torch.Tensor, p: float) -> torch.Tensor:
    """True where a token's value is dropped, each with probability ``p`` (to 1/65,536), from
    the global torch generator (seeded and checkpointed by the trainer): 64-bit random integers
    read as four 16-bit ones, a quarter of the draws of one number per value."""
    count = len(ids) * rows.shape[1]
    words = torch.randint(
        -(2**63), 2**63 - 1, ((count + 3) // 4,), dtype=torch.int64, device=rows.device
    )
    threshold = round(p * 65536) - 32768
    return (words.view(torch.int16)[:count] < threshold).view(len(ids), rows.shape[1])


class _DroppedMean(torch.autograd.Function):
    """``scale[s] * sum`` over sentence ``s``'s tokens ``t`` of ``rows[ids[t]]`` with the values
    where ``drop[t]`` is True zeroed; the gradient flows to ``rows`` only."""

    @staticmethod
    def forward(ctx, rows, ids, sentence_of, scale, drop):
        pieces = rows.index_select(0, ids).masked_fill_(drop, 0.0)
        sums = rows.new_zeros(len(scale), rows.shape[1]).index_add_(0, sentence_of, pieces)
        ctx.save_for_backward(ids, sentence_of, scale, drop)
        ctx.table_rows = rows.shape[0]
        return sums.mul_(scale.unsqueeze(1))

    @staticmethod
    def backward(ctx, grad):
        ids, sentence_of, scale, drop = ctx.saved_tensors
        pieces = (grad * scale.unsqueeze(1)).index_select(0, sentence_of).masked_fill_(drop, 0.0)
        rows = grad.new_zeros(ctx.table_rows, grad.shape[1]).index_add_(0, ids, pieces)
        return rows, None, None, None, None
