"""The code location's executor runs a job's steps in the run's own process unless the run
config asks for ``multiprocess``: a language's run is a chain of steps, and a process per step
cost about 6 s of imports each (a re-run with every stage reused took a minute)."""

from __future__ import annotations

import os

import pytest
from dagster import DagsterEventType, DagsterInstance, execute_job, job, op, reconstructable

from pipelines.executor import psp_executor


@op
def first() -> int:
    return os.getpid()


@op
def second(previous: int) -> int:
    return os.getpid()


@job(executor_def=psp_executor)
def two_steps() -> None:
    second(first())


def step_pids(instance: DagsterInstance, run_config: dict) -> tuple[int, set[int]]:
    with execute_job(reconstructable(two_steps), instance, run_config=run_config) as result:
        assert result.success
        starts = result.get_step_success_events()
        pids = {event.pid for event in starts}
        run_pid = next(
            event.pid
            for event in result.all_events
            if event.event_type == DagsterEventType.RUN_START
        )
    return run_pid, pids


@pytest.fixture()
def instance(tmp_path):
    with DagsterInstance.local_temp(str(tmp_path)) as instance:
        yield instance


def test_steps_run_in_the_run_process_by_default(instance) -> None:
    run_pid, pids = step_pids(instance, {})
    assert pids == {run_pid}


@pytest.mark.slow
def test_multiprocess_by_run_config_gives_each_step_a_process(instance) -> None:
    run_pid, pids = step_pids(instance, {"execution": {"config": {"multiprocess": {}}}})
    assert len(pids) == 2 and run_pid not in pids


def test_a_run_launched_without_labels_gets_its_language_and_profile(monkeypatch) -> None:
    """The launchpad's and dagster job execute's runs: the partition and the run config's
    profile (else the code location's default); labels a launch gave are kept."""
    from dagster import DagsterRun

    from pipelines.executor import run_labels

    monkeypatch.setenv("PSP_PROFILE", "demo")
    smoke = {"resources": {"profile": {"config": {"name": "smoke"}}}}
    launched = DagsterRun(job_name="psp_language_job", tags={"dagster/partition": "fr"})
    assert run_labels(launched) == {"psp/language": "fr", "psp/profile": "demo"}
    configured = DagsterRun(
        job_name="psp_language_job", run_config=smoke, tags={"dagster/partition": "fr"}
    )
    assert run_labels(configured) == {"psp/language": "fr", "psp/profile": "smoke"}
    scheduled = DagsterRun(
        job_name="psp_language_job",
        tags={"dagster/partition": "fr", "psp/language": "fr", "psp/profile": "paper"},
    )
    assert run_labels(scheduled) == {}
    assert run_labels(DagsterRun(job_name="scoreboard_job")) == {"psp/profile": "demo"}
