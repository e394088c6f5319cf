import math

import pytest
import torch

from psp_core.training.loss import margin_loss


def test_margin_loss_hand_computed():
    # pair 1: cos(s,t)=1, cos(s,t')=0, cos(t,s')=1   -> max(0,.4-1+0)+max(0,.4-1+1) = 0 + 0.4
    # pair 2: cos(s,t)=0, cos(s,t')=cos(45deg), cos(t,s')=-1
    #         -> max(0, .4 - 0 + 0.7071) + max(0, .4 - 0 - 1) = 1.1071 + 0
    s = torch.tensor([[1.0, 0.0], [1.0, 0.0]])
    t = torch.tensor([[2.0, 0.0], [0.0, 3.0]])
    t_negative = torch.tensor([[0.0, 1.0], [1.0, 1.0]])
    s_negative = torch.tensor([[5.0, 0.0], [0.0, -1.0]])
    loss = margin_loss(s, t, t_negative, s_negative, margin=0.4)
    expected = (0.4 + (0.4 + math.sqrt(0.5))) / 2
    assert loss.item() == pytest.approx(expected, abs=1e-6)


def test_margin_loss_zero_when_positives_beat_negatives_by_the_margin():
    s = torch.tensor([[1.0, 0.0]])
    t = torch.tensor([[1.0, 0.1]])
    negative = torch.tensor([[-1.0, 0.0]])
    assert margin_loss(s, t, negative, negative).item() == 0.0


def test_margin_loss_gradient_pulls_partners_together():
    s = torch.tensor([[1.0, 0.0]], requires_grad=True)
    t = torch.tensor([[0.0, 1.0]])
    negative = torch.tensor([[1.0, 0.2]])
    margin_loss(s, t, negative, negative).backward()
    # moving s towards t (the +y direction) lowers the loss
    assert s.grad[0, 1] < 0
