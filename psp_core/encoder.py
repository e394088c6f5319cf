"""The P-SP sentence encoder: the mean of a sentence's sentencepiece embeddings.

``g(s) = mean_i E[id_i]``, computed by ``nn.EmbeddingBag(mode="mean")`` over flat ids plus
offsets (no padding, no Python loop over sentences). One table is shared by both languages; it is
the model's only parameter.

Dropout (training only) is applied to the individual piece embeddings before the mean, as in the
reference implementation. EmbeddingBag returns only the mean, so with dropout > 0 the training
path looks the rows up with ``F.embedding``, drops out, and averages with ``index_add_``.
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

    def __init__(self, vocab_size: int, dim: int, *, dropout: float = 0.0, sparse: bool = False):
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
        lengths = offsets[1:] - starts
        pieces = F.dropout(F.embedding(ids, rows, sparse=sparse), p=self.dropout, training=True)
        sentence_of = torch.repeat_interleave(
            torch.arange(len(lengths), device=ids.device), lengths
        )
        sums = pieces.new_zeros(len(lengths), pieces.shape[1]).index_add_(0, sentence_of, pieces)
        return sums / lengths.clamp(min=1).unsqueeze(1).to(sums.dtype)
