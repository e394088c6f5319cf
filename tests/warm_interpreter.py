"""A warm interpreter that runs scripts: one process imports some heavy libraries once, then
forks a child per script, which runs it as ``python SCRIPT ARGS...`` would (``__main__``, its
folder first on ``sys.path``, standard output and error to files), so that a few dozen short
scripts do not each pay seconds of imports.

The server is a process of its own, started with the environment and folder the scripts need;
each child starts from the server's state after the imports and nothing else, and its exit
status is the script's (``SystemExit`` included). A child ends as an interpreter does: it waits
for its non-daemon threads and runs the ``atexit`` functions before it exits.

:meth:`WarmInterpreter.run` runs one script to its end; :meth:`WarmInterpreter.start` starts one
and returns at once, with a handle that answers as :class:`subprocess.Popen` does (``pid``,
``poll``, ``wait``): several may run at a time, each in a session of its own if asked, with an
environment and working folder of its own, so that a test can kill one's process group."""

from __future__ import annotations

import contextlib
import json
import os
import select
import signal
import subprocess
import sys
import time
from pathlib import Path

_SERVER = r"""
import atexit, importlib, json, os, runpy, select, sys, threading, traceback

for name in json.loads(sys.argv[1]):
    importlib.import_module(name)


def run(request):
    if request.get("session"):
        os.setsid()
    if request.get("env") is not None:
        os.environ.clear()
        os.environ.update(request["env"])
        extra = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
        sys.path[1:1] = [p for p in extra if p not in sys.path]
    if request.get("cwd"):
        os.chdir(request["cwd"])
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.dup2(os.open(request["stdout"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644), 1)
    if request["stderr"] == request["stdout"]:
        os.dup2(1, 2)
    else:
        os.dup2(os.open(request["stderr"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644), 2)
    sys.stdin = open(0, closefd=False)
    sys.stdout = open(1, "w", closefd=False)
    sys.stderr = open(2, "w", closefd=False)
    sys.argv = [request["script"], *request["arguments"]]
    sys.path[0] = os.path.dirname(request["script"])
    status = 0
    try:
        runpy.run_path(request["script"], run_name="__main__")
    except SystemExit as stop:
        status = stop.code if isinstance(stop.code, int) else (0 if stop.code is None else 1)
        if not isinstance(stop.code, int | None):
            print(stop.code, file=sys.stderr)
    except BaseException:
        traceback.print_exc()
        status = 1
    try:  # as an interpreter ends: its threads, then the atexit functions
        threading._shutdown()
        atexit._run_exitfuncs()
    except BaseException:
        traceback.print_exc()
    for stream in (sys.stdout, sys.stderr):
        stream.flush()
    os._exit(status)


def say(message):
    os.write(1, (json.dumps(message) + "\n").encode("utf-8"))


say("ready")
children, pending, closed = set(), b"", False
while not closed or children:
    readable, _, _ = select.select([] if closed else [0], [], [], 0.05 if children else None)
    for child in list(children):
        pid, status = os.waitpid(child, os.WNOHANG)
        if pid:
            children.discard(child)
            say({"exited": child, "status": os.waitstatus_to_exitcode(status)})
    if not readable:
        continue
    chunk = os.read(0, 1 << 16)
    closed = not chunk
    pending += chunk
    while b"\n" in pending:
        line, pending = pending.split(b"\n", 1)
        child = os.fork()
        if child == 0:  # never back into this loop, whatever fails before the script runs
            try:
                run(json.loads(line))
            except BaseException:
                traceback.print_exc()
            os._exit(1)
        children.add(child)
        say({"pid": child})
"""


class WarmProcess:
    """A script started by :meth:`WarmInterpreter.start`: ``pid``, ``poll()`` and ``wait()`` as
    :class:`subprocess.Popen` has them (the status comes from the server, which reaps it)."""

    def __init__(self, interpreter: WarmInterpreter, pid: int) -> None:
        self.interpreter = interpreter
        self.pid = pid
        self.returncode: int | None = None

    def poll(self) -> int | None:
        if self.returncode is None:
            self.interpreter._collect(timeout=0)
            self.returncode = self.interpreter._statuses.get(self.pid)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.poll() is None:
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                raise subprocess.TimeoutExpired(f"warm child {self.pid}", timeout)
            self.interpreter._collect(timeout=left if left is not None else 60)
        return self.returncode


class WarmInterpreter:
    """The server process; use it as a context manager (it stops at the end of the block)."""

    def __init__(self, libraries: list[str], *, environment: dict[str, str], cwd: Path) -> None:
        self.process = subprocess.Popen(
            [sys.executable, "-c", _SERVER, json.dumps(libraries)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            env=environment,
            cwd=cwd,
        )
        self._pending = b""
        self._statuses: dict[int, int] = {}
        self._started: list[int] = []
        self._sessions: dict[int, bool] = {}  # every child started: pid -> in a session of its own
        ready = self._message(timeout=300)
        if ready != "ready":
            self.close()
            raise RuntimeError(f"the warm interpreter did not start (it said {ready!r})")

    def start(
        self,
        script: Path | str,
        arguments: list[str],
        *,
        stdout: Path,
        stderr: Path | None = None,
        env: dict[str, str] | None = None,
        cwd: Path | None = None,
        new_session: bool = False,
    ) -> WarmProcess:
        """Start ``script`` with ``arguments`` in a child and return at once (its output files
        exist by then). ``stderr`` ``None``: into ``stdout``'s file; ``env`` ``None``: the
        server's environment."""
        for path in {Path(stdout), Path(stderr or stdout)}:  # there once this returns
            path.touch()
        request = {
            "script": str(script),
            "arguments": arguments,
            "stdout": str(stdout),
            "stderr": str(stderr or stdout),
            "env": env,
            "cwd": None if cwd is None else str(cwd),
            "session": new_session,
        }
        self.process.stdin.write(json.dumps(request).encode("utf-8") + b"\n")
        self.process.stdin.flush()
        while not self._started:
            self._collect(timeout=60, required=True)
        child = WarmProcess(self, self._started.pop(0))
        self._sessions[child.pid] = new_session
        return child

    def run(
        self, script: Path, arguments: list[str], work: Path, timeout: float
    ) -> subprocess.CompletedProcess:
        """Run ``script`` with ``arguments`` in a child; its output is kept under ``work``.
        A script still running after ``timeout`` seconds is killed, and the server with it."""
        stdout, stderr = work / "script.stdout", work / "script.stderr"
        child = self.start(script, arguments, stdout=stdout, stderr=stderr)
        try:
            status = child.wait(timeout)
        except subprocess.TimeoutExpired:
            os.kill(child.pid, signal.SIGKILL)
            self.close()
            raise TimeoutError(f"{script} ran past {timeout:.0f} s") from None
        return subprocess.CompletedProcess(
            [str(script), *arguments],
            status,
            stdout.read_text(encoding="utf-8", errors="replace"),
            stderr.read_text(encoding="utf-8", errors="replace"),
        )

    def _collect(self, timeout: float, required: bool = False) -> None:
        """Read what the server has said within ``timeout`` seconds: started pids and exit
        statuses. ``required``: it must say something in that time."""
        message = self._message(timeout) if required else self._message_or_none(timeout)
        while message is not None:
            if isinstance(message, dict) and "pid" in message:
                self._started.append(message["pid"])
            elif isinstance(message, dict) and "exited" in message:
                self._statuses[message["exited"]] = message["status"]
            message = self._message_or_none(0)

    def _message_or_none(self, timeout: float):
        try:
            return self._message(timeout)
        except TimeoutError:
            return None

    def _message(self, timeout: float):
        """The server's next message (read from the descriptor into a buffer of this object's,
        so that a line already read is never left waiting in a file object's buffer)."""
        deadline = time.monotonic() + timeout
        while b"\n" not in self._pending:
            left = max(0.0, deadline - time.monotonic())
            ready, _, _ = select.select([self.process.stdout], [], [], left)
            if not ready:
                raise TimeoutError(f"no answer from the warm interpreter in {timeout:.0f} s")
            chunk = os.read(self.process.stdout.fileno(), 1 << 16)
            if not chunk:
                raise RuntimeError(f"the warm interpreter ended (status {self.process.wait()})")
            self._pending += chunk
        line, self._pending = self._pending.split(b"\n", 1)
        return json.loads(line)

    def close(self) -> None:
        """Kill the children still running (their process group, for one in a session of its
        own), then stop the server."""
        if self.process.poll() is None:
            self._collect(timeout=0)
            for pid, session in self._sessions.items():
                if pid not in self._statuses:
                    with contextlib.suppress(ProcessLookupError):
                        (os.killpg if session else os.kill)(pid, signal.SIGKILL)
            self.process.stdin.close()
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self.process.stdout.close()

    def __enter__(self) -> WarmInterpreter:
        return self

    def __exit__(self, *_exc) -> None:
        self.close()
