import pytest

from psp_core.training.schedule import MegabatchSchedule, learning_rate_at


@pytest.mark.parametrize(
    ("step", "expected"),
    [(0, 1), (149, 1), (150, 2), (299, 2), (300, 3), (150 * 99, 100), (10**7, 100)],
)
def test_paper_annealing(step, expected):
    assert MegabatchSchedule(max_size=100, anneal_every=150).size_at(step) == expected


def test_no_annealing_starts_at_the_maximum():
    assert MegabatchSchedule(max_size=60, anneal_every=0).size_at(0) == 60


def test_linear_decay_falls_from_lr_to_its_last_step():
    rates = [learning_rate_at(step, 4, 0.1, "linear") for step in range(4)]
    assert rates == pytest.approx([0.1, 0.075, 0.05, 0.025])
    assert learning_rate_at(10, 4, 0.1, "linear") == pytest.approx(0.025)  # never 0 or below
    assert learning_rate_at(3, 4, 0.1, "constant") == 0.1
    with pytest.raises(ValueError, match="cosine"):
        learning_rate_at(0, 4, 0.1, "cosine")
