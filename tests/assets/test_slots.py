import threading
import time

import pytest

from assets.framework.slots import machine_slot


def _wait_for(condition, seconds=5.0):
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.005)


def _hold(directory, limit, held: threading.Event, release: threading.Event, events: list):
    with machine_slot(directory, "psp_training", limit) as slot:
        events.append(("first", slot))
        held.set()
        release.wait(5)
        events.append(("first releasing", slot))


def test_a_second_holder_waits_until_the_only_slot_is_free(tmp_path):
    held, release, events, waits = threading.Event(), threading.Event(), [], []
    first = threading.Thread(target=_hold, args=(tmp_path, 1, held, release, events))
    first.start()
    held.wait(5)

    def second():
        with machine_slot(
            tmp_path, "psp_training", 1, poll_seconds=0.01, on_wait=waits.append
        ) as slot:
            events.append(("second", slot))

    waiter = threading.Thread(target=second)
    waiter.start()
    _wait_for(lambda: waits)
    assert "all 1 psp_training slot(s)" in waits[0] and ("second", 0) not in events
    release.set()
    first.join()
    waiter.join()
    assert events == [("first", 0), ("first releasing", 0), ("second", 0)]
    assert len(waits) == 1  # announced once


def test_with_two_slots_both_run_at_once(tmp_path):
    held, release, events = threading.Event(), threading.Event(), []
    first = threading.Thread(target=_hold, args=(tmp_path, 2, held, release, events))
    first.start()
    held.wait(5)
    waits = []
    with machine_slot(tmp_path, "psp_training", 2, on_wait=waits.append) as slot:
        assert slot == 1 and not waits
    release.set()
    first.join()


def test_a_slot_limit_below_one_is_refused(tmp_path):
    with pytest.raises(ValueError, match="must be >= 1"):
        with machine_slot(tmp_path, "psp_training", 0):
            pass
