"""The warm interpreter (``tests/warm_interpreter.py``) that the benchmarks' quick runs and the
``kill -9`` tests' Dagster runs fork from: each child is what ``python SCRIPT ARGS`` would be."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from tests.warm_interpreter import WarmInterpreter


def test_the_warm_interpreter_runs_a_script_as_python_would(tmp_path: Path) -> None:
    """As ``python SCRIPT ARGS``: ``__main__``, its arguments, a module beside it importable,
    the environment given; a failure's status and traceback come back, and one script's state
    is not the next one's."""
    (tmp_path / "beside.py").write_text("VALUE = 'beside'\n")
    script = tmp_path / "script.py"
    script.write_text(
        "import os, sys\n"
        "import beside\n"
        "STATE = globals().setdefault('STATE', [])\n"
        "if __name__ == '__main__':\n"
        "    print(beside.VALUE, sys.argv[1:], os.environ['WARM_TEST'], 'json' in sys.modules)\n"
        "    sys.modules['json'].marker = True\n"
        "    if sys.argv[1] == 'fail':\n"
        "        raise ValueError('broken')\n"
        "    sys.exit(int(sys.argv[1]))\n"
    )
    environment = os.environ | {"WARM_TEST": "set"}
    with WarmInterpreter(["json"], environment=environment, cwd=tmp_path) as warm:
        ok = warm.run(script, ["0"], tmp_path, timeout=60)
        assert (ok.returncode, ok.stdout) == (0, "beside ['0'] set True\n")
        three = warm.run(script, ["3"], tmp_path, timeout=60)
        assert three.returncode == 3
        failed = warm.run(script, ["fail"], tmp_path, timeout=60)
        assert failed.returncode == 1 and "ValueError: broken" in failed.stderr
        check = tmp_path / "check.py"
        check.write_text("import json\nprint(hasattr(json, 'marker'))\n")
        assert warm.run(check, [], tmp_path, timeout=60).stdout == "False\n"


def test_started_children_run_side_by_side_each_in_its_session_environment_and_folder(
    tmp_path: Path,
) -> None:
    """``start`` returns at once; each child has its own environment (``PYTHONPATH`` included),
    folder and session; a killed process group gives -9; an ending child waits for its
    threads and runs its ``atexit`` functions, as an interpreter does."""
    (tmp_path / "lib").mkdir()
    (tmp_path / "lib" / "extra_module.py").write_text("NAME = 'extra'\n")
    script = tmp_path / "script.py"
    script.write_text(
        "import atexit, os, sys, threading, time\n"
        "import extra_module\n"
        "in_session = os.getsid(0) == os.getpid()\n"
        "print(os.getcwd(), os.environ['WHICH'], extra_module.NAME, in_session, flush=True)\n"
        "if sys.argv[1] == 'sleep':\n"
        "    time.sleep(60)\n"
        "atexit.register(lambda: print('atexit ran', flush=True))\n"
        "threading.Thread(target=lambda: (time.sleep(0.3), print('thread ended'))).start()\n"
        "sys.exit(5)\n"
    )
    folders = [tmp_path / "a", tmp_path / "b"]
    for folder in folders:
        folder.mkdir()
    with WarmInterpreter(["json"], environment=dict(os.environ), cwd=tmp_path) as warm:

        def start(argument: str, folder: Path):
            env = os.environ | {"WHICH": folder.name, "PYTHONPATH": str(tmp_path / "lib")}
            return warm.start(script, [argument], stdout=folder / "log", env=env, cwd=folder,
                              new_session=True)  # fmt: skip

        sleeper, ender = start("sleep", folders[0]), start("end", folders[1])
        assert ender.wait(60) == 5 and sleeper.poll() is None
        assert (folders[1] / "log").read_text().splitlines() == [
            f"{folders[1]} b extra True",
            "thread ended",
            "atexit ran",
        ]
        with pytest.raises(subprocess.TimeoutExpired):
            sleeper.wait(0.2)
        deadline = time.monotonic() + 30
        while not (folders[0] / "log").read_text() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert (folders[0] / "log").read_text() == f"{folders[0]} a extra True\n"
        os.killpg(sleeper.pid, signal.SIGKILL)
        assert sleeper.wait(30) == -9
        # a child that cannot even start (no such folder) fails alone; the server goes on
        lost = warm.start(script, ["end"], stdout=tmp_path / "lost.log", cwd=tmp_path / "gone")
        assert lost.wait(30) == 1
        assert start("end", folders[0]).wait(60) == 5
