import pytest

from psp_core.training.schedule import MegabatchSchedule


@pytest.mark.parametrize(
    ("step", "expected"),
    [(0, 1), (149, 1), (150, 2), (299, 2), (300, 3), (150 * 99, 100), (10**7, 100)],
)
def test_paper_annealing(step, expected):
    assert MegabatchSchedule(max_size=100, anneal_every=150).size_at(step) == expected


def test_no_annealing_starts_at_the_maximum():
    assert MegabatchSchedule(max_size=60, anneal_every=0).size_at(0) == 60
