"""Real ``dagster job execute`` processes for fault tests: a SQLite ``DAGSTER_HOME`` with this
repo's ``dagster.yaml``, the loopback OPUS server's de corpora, a tiny evaluation directory."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest
import yaml

from tests.ops.opus_server import OpusServer
from tests.pipelines.corpora import write_eval_dir
from tests.warm_interpreter import WarmInterpreter, WarmProcess

ROOT = Path(__file__).resolve().parents[2]
DAGSTER = str(Path(sys.executable).with_name("dagster"))


def dagster_env(work: Path, server: OpusServer, name: str = "") -> dict[str, str]:
    """The environment of a run whose instance and storage live under ``work/name``."""
    base = work / name if name else work
    home, storage, eval_dir = base / "home", base / "storage", work / "eval"
    home.mkdir(parents=True)
    shutil.copy(ROOT / "configs" / "dagster.yaml", home / "dagster.yaml")
    if not eval_dir.exists():
        write_eval_dir(eval_dir)
    return os.environ | {
        "DAGSTER_HOME": str(home),
        "PSP_STORAGE_ROOT": str(storage),
        "PSP_OPUS_API": server.api_url,
        "PSP_EVAL_DIR": str(eval_dir),
        "PSP_DEVICE": "cpu",
        "PYTHONPATH": str(ROOT),
        "NO_PROXY": "127.0.0.1,localhost",
        "no_proxy": "127.0.0.1,localhost",
    }


def write_config(path: Path, profile: str, *, epochs: int, in_process: bool) -> Path:
    """``configs/profile`` with ``epochs`` training epochs and the chosen executor."""
    config = yaml.safe_load((ROOT / "configs" / profile).read_text())
    config.setdefault("ops", {}).setdefault("psp_model", {}).setdefault("config", {})
    config["ops"]["psp_model"]["config"]["epochs"] = epochs
    config["execution"] = {"config": {"in_process": {}} if in_process else {"multiprocess": {}}}
    path.write_text(yaml.safe_dump(config))
    return path


#: what a run imports that takes seconds (never a module of the project, which reads its
#: settings from the environment as it is imported)
RUN_LIBRARIES = ["numpy", "pyarrow", "pandas", "h5py", "sentencepiece", "torch", "dagster._cli"]


def warm_run_interpreter() -> WarmInterpreter:
    """A warm interpreter for :class:`Runs` (its environment's ``PYTHONPATH`` this checkout; each
    run brings its own environment)."""
    environment = os.environ | {"PYTHONPATH": str(ROOT)}
    return WarmInterpreter(RUN_LIBRARIES, environment=environment, cwd=ROOT)


class Runs:
    """Starts ``dagster job execute`` processes (each in a session of its own) and kills every
    one still alive, with its step processes, on exit.

    Each run is forked from ``warm`` (the ``warm_runs`` fixture's :func:`warm_run_interpreter`), a
    warm interpreter (``tests/warm_interpreter.py``), which has imported
    :data:`RUN_LIBRARIES` once: the same command line, environment and folder, without seconds
    of imports per run."""

    def __init__(self, warm: WarmInterpreter) -> None:
        self.started: list[WarmProcess] = []
        self.warm = warm

    def execute(
        self, job: str, config: Path, env: dict, log: Path, partition: str | None = "de"
    ) -> WarmProcess:
        arguments = ["job", "execute", "-m", "pipelines.definitions", "-j", job]
        if partition is not None:
            arguments += ["--tags", json.dumps({"dagster/partition": partition})]
        arguments += ["-c", str(config)]
        return self.script(DAGSTER, arguments, env, log)

    def script(self, script: str, arguments: list[str], env: dict, log: Path) -> WarmProcess:
        """The Python script ``script`` with ``arguments``, from the repository root, in a
        session of its own, standard output and error into ``log``."""
        process = self.warm.start(
            script, arguments, stdout=log, env=env, cwd=ROOT, new_session=True
        )
        self.started.append(process)
        return process

    def __enter__(self) -> Runs:
        return self

    def __exit__(self, *exc) -> None:
        for process in self.started:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            process.wait()


#: the longest wait after a step's start before its run is killed (seconds)
LONGEST_KILL_DELAY = 1.5


def run_to_the_end(process, log: Path, stages: list[str], timeout: float) -> dict[str, float]:
    """Wait for a started run to end (it must succeed), noting when each of ``stages``' steps
    started in its ``log``: the seconds from each step's start to the run's end."""
    started: dict[str, float] = {}

    def run_ended() -> bool:
        text, now = tail(log, 10**7), time.monotonic()
        started.update({s: now for s in stages if s not in started and _step_started(s) in text})
        return process.poll() is not None

    wait_for(run_ended, timeout, "the run to end", [log], every=0.05)
    ended = time.monotonic()
    assert process.wait() == 0, tail(log)
    text = tail(log, 10**7)
    missing = [stage for stage in stages if _step_started(stage) not in text]
    assert missing == [], f"steps {missing} never started\n{tail(log)}"
    return {stage: ended - started.get(stage, ended) for stage in stages}


def _step_started(stage: str) -> str:
    return f'Started execution of step "{stage}"'


def kill_in_each_stage(
    runs: Runs,
    job: str,
    stages: list[str],
    *,
    config: Path,
    env: dict,
    logs_dir: Path,
    rng,
    seed: int,
    left_after_start: dict[str, float],
    partition: str | None = "de",
) -> tuple[list[tuple], list[Path]]:
    """For each stage in turn, start ``job``, wait for the stage's step to start, and kill the
    run's whole process group (``SIGKILL``) after a random delay: at most
    :data:`LONGEST_KILL_DELAY`, and within the first half of what was left of the reference run
    after that step started (``left_after_start``, from :func:`run_to_the_end`), so that the
    kill comes before the run ends. Returns the kills (stage, delay, exit status: -9 killed, 0
    when it had finished first; and the seed) and the logs."""
    kills, logs = [], []
    for stage in stages:
        logs.append(logs_dir / f"killed-in-{stage}.log")
        process = runs.execute(job, config, env, logs[-1], partition=partition)
        wait_for(
            lambda log=logs[-1], p=process, stage=stage: (
                _step_started(stage) in tail(log, 10**7) or p.poll() is not None
            ),
            240,
            f"step {stage} to start",
            logs[-1:],
            every=0.05,  # (the kill's delay counts from here)
        )
        assert process.poll() is None, tail(logs[-1])
        delay = rng.uniform(0.0, min(LONGEST_KILL_DELAY, left_after_start[stage] / 2))
        time.sleep(delay)
        with contextlib.suppress(ProcessLookupError):  # ended and reaped already (warm runs)
            os.killpg(process.pid, signal.SIGKILL)
        kills.append((stage, round(delay, 2), process.wait(), f"seed {seed}"))
    return kills, logs


def tail(path: Path, chars: int = 3000) -> str:
    return f"--- {path}\n{path.read_text(errors='replace')[-chars:]}" if path.exists() else ""


def wait_for(
    condition: Callable[[], bool], timeout: float, what: str, logs: list[Path], every: float = 0.2
) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(every)
    pytest.fail(f"timed out after {timeout}s waiting for {what}\n" + "\n".join(map(tail, logs)))


def children(pid: int) -> list[int]:
    out = subprocess.run(["ps", "-o", "pid=", "--ppid", str(pid)], capture_output=True, text=True)
    return [int(x) for x in out.stdout.split()]


def cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return ""


def alive(pid: int) -> bool:
    """True while ``pid`` runs (a zombie, killed but not yet reaped, counts as gone)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"
