"""The P-SP margin loss (Wieting et al., "Paraphrastic Representations at Scale", eq. 1).

For a pair ``(s, t)`` with hard negatives ``t'`` (the sentence most similar to ``s`` among the
candidates for ``s``) and ``s'`` (most similar to ``t``)::

    loss(s, t) = max(0, d - cos(g(s), g(t)) + cos(g(s), g(t')))
               + max(0, d - cos(g(s), g(t)) + cos(g(t), g(s')))

with margin ``d = 0.4``, averaged over the batch.

References:
    J. Wieting, K. Gimpel, G. Neubig, T. Berg-Kirkpatrick. Paraphrastic Representations at
    Scale. EMNLP 2022 (system demonstrations).
    J. Wieting, K. Gimpel, G. Neubig, T. Berg-Kirkpatrick. Simple and Effective Paraphrastic
    Similarity from Parallel Translations. ACL 2019.

Example::

    >>> import torch
    >>> s = torch.tensor([[1.0, 0.0]]); t = torch.tensor([[1.0, 0.0]])
    >>> margin_loss(s, t, t_negative=torch.tensor([[0.0, 1.0]]),
    ...             s_negative=torch.tensor([[0.0, 1.0]]))
    tensor(0.)
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

DEFAULT_MARGIN = 0.4


def margin_loss(
    s: torch.Tensor,
    t: torch.Tensor,
    t_negative: torch.Tensor,
    s_negative: torch.Tensor,
    margin: float = DEFAULT_MARGIN,
) -> torch.Tensor:
    """Mean two-sided hinge loss over a batch of embeddings.

    Args:
        s: ``[batch, dim]`` embeddings of the source sentences.
        t: ``[batch, dim]`` embeddings of their partners.
        t_negative: ``[batch, dim]`` embeddings of the negatives paired with ``s``.
        s_negative: ``[batch, dim]`` embeddings of the negatives paired with ``t``.
        margin: the margin ``d``.

    Returns:
        A scalar tensor.
    """
    positive = F.cosine_similarity(s, t, dim=1)
    negative_for_s = F.cosine_similarity(s, t_negative, dim=1)
    negative_for_t = F.cosine_similarity(t, s_negative, dim=1)
    loss = (margin - positive + negative_for_s).clamp(min=0) + (
        margin - positive + negative_for_t
    ).clamp(min=0)
    return loss.mean()


def nested_margin_loss(
    s: torch.Tensor,
    t: torch.Tensor,
    t_negative: torch.Tensor,
    s_negative: torch.Tensor,
    dims: tuple[int, ...],
    margin: float = DEFAULT_MARGIN,
) -> torch.Tensor:
    """:func:`margin_loss` summed over the prefixes ``[:, :d]`` for each ``d`` in ``dims``
    (Matryoshka representation learning, Kusupati et al. 2022): each prefix of a vector learns
    to be an embedding on its own. With ``dims == (dim,)`` it is :func:`margin_loss`."""
    full = s.shape[1]
    total = None
    for d in dims:
        parts = (
            (s, t, t_negative, s_negative)
            if d >= full
            else (s[:, :d], t[:, :d], t_negative[:, :d], s_negative[:, :d])
        )
        loss = margin_loss(*parts, margin=margin)
        total = loss if total is None else total + loss
    return total
