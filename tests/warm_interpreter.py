"""A warm interpreter that runs scripts: one process imports some heavy libraries once, then
forks a child per script, which runs it as ``python SCRIPT ARGS...`` would (``__main__``, its
folder first on ``sys.path``, standard output and error to files), so that a few dozen short
scripts do not each pay seconds of imports.

The server is a process of its own, started with the environment and folder the scripts need;
each child starts from the server's state after the imports and nothing else, and its exit
status is the script's (``SystemExit`` included)."""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import sys
import time
from pathlib import Path

_SERVER = r"""
import importlib, json, os, runpy, sys, traceback

for name in json.loads(sys.argv[1]):
    importlib.import_module(name)
protocol_in, protocol_out = sys.stdin, sys.stdout


def run(request):
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    for fd, path in ((1, request["stdout"]), (2, request["stderr"])):
        os.dup2(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644), fd)
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
    for stream in (sys.stdout, sys.stderr):
        stream.flush()
    os._exit(status)


protocol_out.write("ready\n")
protocol_out.flush()
for line in protocol_in:
    request = json.loads(line)
    child = os.fork()
    if child == 0:
        protocol_in.close()
        run(request)
    protocol_out.write(json.dumps({"pid": child}) + "\n")
    protocol_out.flush()
    _, status = os.waitpid(child, 0)
    protocol_out.write(json.dumps({"status": os.waitstatus_to_exitcode(status)}) + "\n")
    protocol_out.flush()
"""


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
        ready = self._reply(timeout=300)
        if ready != "ready":
            self.close()
            raise RuntimeError(f"the warm interpreter did not start (it said {ready!r})")

    def run(
        self, script: Path, arguments: list[str], work: Path, timeout: float
    ) -> subprocess.CompletedProcess:
        """Run ``script`` with ``arguments`` in a child; its output is kept under ``work``.
        A script still running after ``timeout`` seconds is killed, and the server with it."""
        stdout, stderr = work / "script.stdout", work / "script.stderr"
        request = {
            "script": str(script),
            "arguments": arguments,
            "stdout": str(stdout),
            "stderr": str(stderr),
        }
        self.process.stdin.write(json.dumps(request).encode("utf-8") + b"\n")
        self.process.stdin.flush()
        child = json.loads(self._reply(timeout=60))["pid"]
        try:
            status = json.loads(self._reply(timeout=timeout))["status"]
        except TimeoutError:
            os.kill(child, signal.SIGKILL)
            self.close()
            raise
        return subprocess.CompletedProcess(
            [str(script), *arguments],
            status,
            stdout.read_text(encoding="utf-8", errors="replace"),
            stderr.read_text(encoding="utf-8", errors="replace"),
        )

    def _reply(self, timeout: float) -> str:
        """The server's next line (read from the descriptor into a buffer of this object's, so
        that a line already read is never left waiting in a file object's buffer)."""
        deadline = time.monotonic() + timeout
        while b"\n" not in self._pending:
            ready, _, _ = select.select([self.process.stdout], [], [], deadline - time.monotonic())
            if not ready:
                raise TimeoutError(f"no answer from the warm interpreter in {timeout:.0f} s")
            chunk = os.read(self.process.stdout.fileno(), 1 << 16)
            if not chunk:
                raise RuntimeError(f"the warm interpreter ended (status {self.process.wait()})")
            self._pending += chunk
        line, self._pending = self._pending.split(b"\n", 1)
        return line.decode("utf-8")

    def close(self) -> None:
        if self.process.poll() is None:
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
