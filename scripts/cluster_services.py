"""Processes of a small Dagster cluster on one machine, each started in a session of its own and
stopped by its process group (so what it started, a Celery pool process or a run worker, goes
with it): Redis (the Celery broker), a gRPC code server, Celery workers and the Dagster daemon.
PostgreSQL is ``scripts/postgres.py``'s (a ``pg_ctl`` daemon, stopped by its data directory).
Used by ``scripts/cluster_e2e.py``.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

BIN = Path(sys.executable).parent


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def wait_for(condition, what: str, timeout: float, interval: float = 0.3) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what}: not ready after {timeout:.0f} s")
        time.sleep(interval)


def port_open(port: int) -> bool:
    with socket.socket() as probe:
        probe.settimeout(0.5)
        return probe.connect_ex(("127.0.0.1", port)) == 0


@dataclass
class Service:
    name: str
    process: subprocess.Popen
    log: Path

    @property
    def pid(self) -> int:
        return self.process.pid

    def alive(self) -> bool:
        return self.process.poll() is None


@dataclass
class Services:
    """Started processes by name; :meth:`stop_all` stops every one still running, newest first."""

    logs: Path
    started: dict[str, Service] = field(default_factory=dict)
    process_groups: list[int] = field(default_factory=list)

    def start(self, name: str, command: list[str], env: dict, cwd: Path) -> Service:
        cwd.mkdir(parents=True, exist_ok=True)
        log = self.logs / f"{name}.log"
        with open(log, "ab") as handle:
            process = subprocess.Popen(
                command,
                cwd=cwd,
                env=env,
                stdout=handle,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,  # its own process group: stopped with its children
            )
        service = Service(name, process, log)
        self.started[name] = service
        self.process_groups.append(process.pid)
        print(f"started {name} (pid {process.pid}): {' '.join(command)}", flush=True)
        return service

    def kill(self, name: str) -> None:
        """``kill -9`` the service's whole process group, at once."""
        service = self.started.pop(name)
        _signal_group(service.pid, signal.SIGKILL)
        service.process.wait()
        _wait_group_gone(service.pid)

    def pause(self, name: str, whole_group: bool) -> None:
        """``SIGSTOP`` the service's main process, or its whole process group."""
        self._signal(name, signal.SIGSTOP, whole_group)

    def resume(self, name: str, whole_group: bool) -> None:
        self._signal(name, signal.SIGCONT, whole_group)

    def _signal(self, name: str, signum: int, whole_group: bool) -> None:
        pid = self.started[name].pid
        if whole_group:
            _signal_group(pid, signum)
        else:
            os.kill(pid, signum)

    def stop(self, name: str, grace: float = 10.0) -> None:
        service = self.started.pop(name)
        _signal_group(service.pid, signal.SIGCONT)  # a paused service could not stop
        _signal_group(service.pid, signal.SIGTERM)
        try:
            service.process.wait(grace)
        except subprocess.TimeoutExpired:
            pass
        _signal_group(service.pid, signal.SIGKILL)  # what is left of the group
        service.process.wait()
        _wait_group_gone(service.pid)

    def stop_all(self) -> None:
        for name in reversed(list(self.started)):
            self.stop(name)

    def left_running(self) -> list[str]:
        """``pid command`` of every live process (zombies aside) in a group this object started."""
        groups = set(self.process_groups)
        listing = subprocess.run(
            ["ps", "-eo", "pid=,pgid=,stat=,args="], capture_output=True, text=True, check=True
        ).stdout
        left = []
        for line in listing.splitlines():
            pid, pgid, stat, args = (line.split(None, 3) + ["", "", "", ""])[:4]
            if stat.startswith("Z"):  # exited, waiting for its parent (init here) to reap it
                continue
            if int(pgid) in groups and int(pid) != os.getpid():
                left.append(f"{pid} {args[:120]}")
        return left


def _stat_fields(stat: Path) -> list[str] | None:
    """The fields of a ``/proc/PID/stat`` after the command (state, ppid, pgrp, ...)."""
    try:
        return stat.read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None


def alive(pid: int) -> bool:
    """Whether process ``pid`` exists and has not exited (a zombie has)."""
    fields = _stat_fields(Path(f"/proc/{pid}/stat"))
    return fields is not None and fields[0] != "Z"


def _group_members(pgid: int) -> list[int]:
    """Live (not zombie) processes of process group ``pgid``."""
    members = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        fields = _stat_fields(stat)
        if fields is not None and fields[0] != "Z" and int(fields[2]) == pgid:
            members.append(int(stat.parent.name))
    return members


def _wait_group_gone(pgid: int, timeout: float = 10.0) -> None:
    """Wait until every process of the group has exited (a killed process takes a moment)."""
    deadline = time.monotonic() + timeout
    while _group_members(pgid) and time.monotonic() < deadline:
        time.sleep(0.05)


def _signal_group(pgid: int, signum: int) -> None:
    try:
        os.killpg(pgid, signum)
    except ProcessLookupError:
        pass


def start_redis(services: Services, work: Path, port: int, durable: bool = False) -> Service:
    """A Redis server on 127.0.0.1:``port``; ``durable``: with an append-only file written at
    every change, as a production broker runs (its queue and results survive a restart), else
    keeping nothing on disk."""
    server = _which("redis-server", "apt-get install redis-server")
    command = [server, "--port", str(port), "--bind", "127.0.0.1", "--dir", str(work)]
    command += ["--save", "", "--daemonize", "no"]
    command += (
        ["--appendonly", "yes", "--appendfsync", "always"] if durable else ["--appendonly", "no"]
    )
    service = services.start("redis", command, os.environ.copy(), work)
    wait_for(lambda: port_open(port), "redis", 30)
    return service


def start_code_server(services: Services, env: dict, root: Path, port: int) -> Service:
    """The code location served over gRPC (what a workspace's ``grpc_server`` entry points at)."""
    command = [str(BIN / "dagster"), "api", "grpc", "-m", "pipelines.definitions"]
    command += ["-h", "127.0.0.1", "-p", str(port)]
    service = services.start("code-server", command, env, root)
    health = [str(BIN / "dagster"), "api", "grpc-health-check", "-p", str(port)]
    wait_for(
        lambda: subprocess.run(health, capture_output=True, env=env).returncode == 0,
        "code server",
        180,
        interval=1.0,
    )
    return service


def start_worker(
    services: Services, name: str, env: dict, work: Path, app: str = "pipelines.celery_worker"
) -> Service:
    """A Celery worker with one pool process, in a working directory of its own (``app``: the
    module of its Celery app)."""
    command = [str(BIN / "celery"), "-A", app, "worker"]
    command += ["-n", f"{name}@%h", "-Q", "dagster", "--concurrency", "1", "--pool", "prefork"]
    command += ["--without-gossip", "--without-mingle", "--loglevel", "INFO"]
    return services.start(name, command, env, work / name)


def start_daemon(services: Services, env: dict, work: Path, workspace: Path) -> Service:
    command = [str(BIN / "dagster-daemon"), "run", "-w", str(workspace)]
    return services.start("daemon", command, env, work)


def _which(program: str, install: str) -> str:
    import shutil

    found = shutil.which(program)
    if not found:
        raise FileNotFoundError(f"{program} is not installed ({install})")
    return found
