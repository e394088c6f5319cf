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

    def stop(self, name: str, grace: float = 10.0) -> None:
        service = self.started.pop(name)
        _signal_group(service.pid, signal.SIGTERM)
        try:
            service.process.wait(grace)
        except subprocess.TimeoutExpired:
            pass
        _signal_group(service.pid, signal.SIGKILL)  # what is left of the group
        service.process.wait()

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


def _signal_group(pgid: int, signum: int) -> None:
    try:
        os.killpg(pgid, signum)
    except ProcessLookupError:
        pass


def start_redis(services: Services, work: Path, port: int) -> Service:
    """A Redis server on 127.0.0.1:``port`` that keeps nothing on disk (the broker's queue lives
    as long as the cluster)."""
    server = _which("redis-server", "apt-get install redis-server")
    command = [server, "--port", str(port), "--bind", "127.0.0.1", "--dir", str(work)]
    command += ["--save", "", "--appendonly", "no", "--daemonize", "no"]
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


def start_worker(services: Services, name: str, env: dict, work: Path) -> Service:
    """A Celery worker with one pool process, in a working directory of its own."""
    command = [str(BIN / "celery"), "-A", "pipelines.celery_worker", "worker"]
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
