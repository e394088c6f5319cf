"""How the Celery executor judges a step by its own task (``pipelines/celery_step_monitor.py``), on a
clock the test moves: a STARTED task is alive while its beat moves, lost after its lease's
silence whatever its worker's name; a RECEIVED task is lost when its worker stops answering or
answers without it; an outage of the executor's own backend judges nobody. The same rules on
real workers: ``tests/pipelines/test_celery.py``."""

from __future__ import annotations

import importlib.util

import pytest

pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("dagster_celery") is None,
    reason="dagster-celery is not installed (pip install -e '.[cluster]')",
)

LEASE = {"beat_s": 1.0, "lease_s": 4.0, "hostname": "worker-1@vm"}  # lost after 4 + 2 + 1 = 7 s


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class Workers:
    """What ``app.control.inspect(...).query_task`` answers: ``holding`` per worker, or no
    reply from the workers in ``silent``."""

    def __init__(self) -> None:
        self.holding: dict[str, set[str]] = {}
        self.silent: set[str] = set()

    @property
    def control(self):
        return self

    def inspect(self, destination, timeout, limit):
        workers = self

        class Inspect:
            def query_task(self, *ids):
                return {
                    host: {i: ["reserved", {}] for i in ids if i in workers.holding.get(host, ())}
                    for host in destination
                    if host not in workers.silent
                }

        return Inspect()


@pytest.fixture
def watch():
    from pipelines.celery_step_monitor import StepWatch

    clock = Clock()
    return StepWatch(Workers(), clock=clock), clock


def test_a_started_task_is_alive_while_its_beat_moves_and_lost_after_the_lease(watch):
    watch, clock = watch
    for beat in range(1, 20):  # 19 s of beats: never lost, however long the step runs
        assert watch.verdict("t", "STARTED", LEASE | {"beat": beat}) is None
        clock.now += 1.0
    assert watch.verdict("t", "STARTED", LEASE | {"beat": 19}) is None  # 1 s of silence
    clock.now += 5.5
    assert watch.verdict("t", "STARTED", LEASE | {"beat": 19}) is None  # 6.5 s: within the lease
    clock.now += 1.0
    message = watch.verdict("t", "STARTED", LEASE | {"beat": 19})
    assert message is not None and "worker-1@vm stopped renewing its lease" in message


def test_a_worker_back_under_the_same_name_does_not_keep_its_old_task_alive(watch):
    """The restarted worker answers every ping, but nothing renews the old task: lost."""
    watch, clock = watch
    watch.app.holding["worker-1@vm"] = set()  # it answers, holding nothing
    assert watch.verdict("old", "STARTED", LEASE | {"beat": 3}) is None
    clock.now += 7.5
    watch.ask_workers()
    assert watch.verdict("old", "STARTED", LEASE | {"beat": 3}) is not None
    # and its next task is judged on its own beats, from scratch
    assert watch.verdict("next", "STARTED", LEASE | {"beat": 1}) is None
    clock.now += 3.0
    assert watch.verdict("next", "STARTED", LEASE | {"beat": 2}) is None


def test_a_received_task_is_lost_when_its_worker_no_longer_holds_it(watch):
    watch, clock = watch
    workers = watch.app
    workers.holding["worker-1@vm"] = {"t"}
    assert watch.verdict("t", "RECEIVED", LEASE) is None
    for _ in range(5):  # held: never lost, however long it waits to start
        clock.now += 2.5
        watch.ask_workers()
        assert watch.verdict("t", "RECEIVED", LEASE) is None
    workers.holding["worker-1@vm"] = set()  # restarted: answers without it
    clock.now += 2.5
    watch.ask_workers()
    assert watch.verdict("t", "RECEIVED", LEASE) is None  # once could be a race with STARTED
    clock.now += 2.5
    watch.ask_workers()
    assert "no longer holds it" in watch.verdict("t", "RECEIVED", LEASE)


def test_a_received_task_is_lost_when_its_worker_stops_answering(watch):
    watch, clock = watch
    workers = watch.app
    workers.holding["worker-1@vm"] = {"t"}
    assert watch.verdict("t", "RECEIVED", LEASE) is None
    workers.silent.add("worker-1@vm")  # killed, or paused
    for _ in range(3):
        clock.now += 2.1
        watch.ask_workers()
        assert watch.verdict("t", "RECEIVED", LEASE) is None
    clock.now += 2.1
    watch.ask_workers()
    assert "stopped answering" in watch.verdict("t", "RECEIVED", LEASE)


def test_an_outage_of_the_backend_judges_no_task(watch):
    """While the executor cannot read the backend, beats cannot be seen: after it, every task
    gets a whole lease again rather than being lost for the executor's own silence."""
    watch, clock = watch
    assert watch.verdict("t", "STARTED", LEASE | {"beat": 5}) is None
    clock.now += 5.0
    watch.backend_failed()
    clock.now += 20.0
    assert watch.backend_failed() == pytest.approx(20.0)
    watch.backend_answered()
    assert watch.verdict("t", "STARTED", LEASE | {"beat": 5}) is None
    clock.now += 7.5
    assert watch.verdict("t", "STARTED", LEASE | {"beat": 5}) is not None


def test_a_pending_task_waits_in_the_queue_for_ever(watch):
    watch, clock = watch
    assert watch.verdict("t", "PENDING", None) is None
    clock.now += 3600
    assert watch.verdict("t", "PENDING", None) is None


def test_the_lost_window_is_longer_than_the_lease_the_worker_holds():
    from pipelines.celery_step_heartbeat import lost_after

    assert lost_after({"beat_s": 2, "lease_s": 10}) == 15.0
    assert lost_after(LEASE) > LEASE["lease_s"] + LEASE["beat_s"]
