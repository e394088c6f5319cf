"""Dropout on piece embeddings (``psp_core/training/encoder.py``): each value dropped with probability p,
the kept ones scaled by 1 / (1 - p), the sentence the mean of its pieces, and the gradient that of
exactly that computation, on the gathered rows (training) and on the whole table, dense or
sparse."""

from __future__ import annotations

import pytest
import torch

from psp_core.training.encoder import MeanEmbeddingEncoder, _drop_mask, _DroppedMean

IDS = torch.tensor([4, 1, 4, 9, 1, 1, 2, 7, 7, 3])
OFFSETS = torch.tensor([0, 3, 3, 7, 10])  # the second sentence is empty


def _explicit(rows, ids, offsets, drop, p):
    """The definition, written out with autograd: mean over each sentence of its pieces' rows,
    dropped values zeroed and kept ones scaled by 1 / (1 - p)."""
    pieces = rows[ids] * (~drop) / (1 - p)
    out = []
    for start, stop in zip(offsets[:-1].tolist(), offsets[1:].tolist(), strict=True):
        out.append(pieces[start:stop].sum(0) / max(stop - start, 1))
    return torch.stack(out)


@pytest.mark.parametrize("p", [0.1, 0.3, 0.5])
def test_the_mean_and_gradient_are_those_of_the_definition_with_the_same_mask(p):
    encoder = MeanEmbeddingEncoder(12, 8, dropout=p)
    encoder.train()
    rows = encoder.weight.detach().clone().requires_grad_()
    torch.manual_seed(11)
    got = encoder.forward_rows(rows, IDS, OFFSETS)
    torch.manual_seed(11)  # the same draws: the mask is the only random thing
    drop = _drop_mask(IDS, rows, p)
    assert drop.any() and not drop.all()
    expected_rows = encoder.weight.detach().clone().requires_grad_()
    expected = _explicit(expected_rows, IDS, OFFSETS, drop, p)
    assert torch.allclose(got, expected, atol=1e-6)
    assert torch.equal(got[1], torch.zeros(8))  # an empty sentence is the zero vector
    weights = torch.randn(got.shape)
    (got * weights).sum().backward()
    (expected * weights).sum().backward()
    assert torch.allclose(rows.grad, expected_rows.grad, atol=1e-6)


def test_the_gradient_passes_a_numerical_check():
    rows = torch.randn(12, 5, dtype=torch.float64, requires_grad=True)
    sentence_of = torch.repeat_interleave(torch.arange(4), OFFSETS[1:] - OFFSETS[:-1])
    scale = torch.tensor([1 / 3, 1.0, 1 / 4, 1 / 3], dtype=torch.float64) / 0.7
    drop = torch.rand(len(IDS), 5, generator=torch.Generator().manual_seed(2)) < 0.3

    def mean(table):
        return _DroppedMean.apply(table, IDS, sentence_of, scale, drop)

    assert torch.autograd.gradcheck(mean, (rows,))


@pytest.mark.slow
def test_values_are_dropped_with_the_probability_asked_in_every_lane_of_the_draws():
    """The mask reads each 64-bit draw as four 16-bit numbers: each of the four lanes (and so
    every dimension) is dropped at the rate asked."""
    torch.manual_seed(0)
    ids, rows = torch.zeros(50_000, dtype=torch.long), torch.zeros(1, 1024)
    for p in (0.1, 0.3):
        drop = _drop_mask(ids, rows, p)
        assert drop.shape == (50_000, 1024)
        assert drop.float().mean().item() == pytest.approx(p, abs=0.001)
        lanes = drop.view(-1, 4).float().mean(0)
        assert torch.allclose(lanes, torch.full((4,), p), atol=0.002)
        per_dimension = drop.float().mean(0)
        assert (per_dimension - p).abs().max().item() < 0.01  # about 5 standard deviations


@pytest.mark.slow
def test_dropout_leaves_the_mean_unbiased():
    torch.manual_seed(3)
    encoder = MeanEmbeddingEncoder(12, 16, dropout=0.3)
    encoder.eval()
    plain = encoder(IDS, OFFSETS).detach()
    encoder.train()
    draws = torch.stack([encoder(IDS, OFFSETS).detach() for _ in range(4000)])
    assert not torch.allclose(draws[0], plain)
    assert torch.allclose(draws.mean(0), plain, atol=0.05)


def test_the_sparse_table_gets_the_dense_tables_gradient_with_one_row_per_piece():
    grads = {}
    for sparse in (False, True):
        encoder = MeanEmbeddingEncoder(12, 6, dropout=0.3, sparse=sparse)
        encoder.reset_parameters(torch.Generator().manual_seed(1))
        encoder.train()
        torch.manual_seed(7)
        encoder(IDS, OFFSETS).pow(2).sum().backward()
        grads[sparse] = encoder.weight.grad
    assert grads[True].is_sparse and not grads[False].is_sparse
    assert grads[True].coalesce().indices().shape[1] == len(IDS.unique())
    assert torch.allclose(grads[True].to_dense(), grads[False], atol=1e-6)
