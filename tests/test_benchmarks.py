"""Every benchmark script (benchmarks/*.py) runs its ``--quick`` version, the script's own code
path on tiny settings, and prints one JSON object on stdout: a script broken by a change of the
packages fails here rather than on the day someone measures with it.

Each runs as a user runs it (``python benchmarks/NAME.py --quick``: from the repository root, as
``__main__``, in a process of its own) with a temporary ``--results-dir``, so nothing is written
into the checkout. The process is forked from a warm interpreter that has imported the heavy
third-party libraries once (torch, dagster, pandas...), so that some thirty scripts do not each
pay seconds of imports; nothing of the project is imported before the script runs, so settings a
script reads from the environment at import time are its own. A script that prints
``{"skipped": ...}`` (no real data; gpu_speed.py without CUDA) is reported as skipped with its
reason.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from tests.warm_interpreter import WarmInterpreter

ROOT = Path(__file__).resolve().parents[1]
BENCHMARKS = ROOT / "benchmarks"
SCRIPTS = sorted(path.name for path in BENCHMARKS.glob("*.py") if not path.name.startswith("_"))
#: what the scripts need beside the project (a GPU for gpu_speed.py, the shared data for the rest)
NEEDS = {"gpu_speed.py": pytest.mark.gpu}
TIMEOUT_S = 180


def quick_environment() -> dict[str, str]:
    """This interpreter's environment, with the checkout first on ``PYTHONPATH`` (the scripts
    import ``psp_core``, ``ops``... from whatever checkout runs them), one OpenMP thread per
    script (the suite runs tests side by side, and a torch parallel region waiting for a
    descheduled thread turns every call slow) and no bytecode written beside the scripts."""
    path = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
    return os.environ | {
        "PYTHONPATH": path,
        "OMP_NUM_THREADS": "1",
        "PYTHONDONTWRITEBYTECODE": "1",
    }


#: what the scripts import that takes seconds; never a module of the project
HEAVY_LIBRARIES = [
    "numpy",
    "scipy",
    "pyarrow",
    "pandas",
    "h5py",
    "sentencepiece",
    "torch",
    "dagster",
]


@pytest.fixture(scope="module")
def warm_interpreter():
    with WarmInterpreter(HEAVY_LIBRARIES, environment=quick_environment(), cwd=ROOT) as warm:
        yield warm


@pytest.mark.slow
@pytest.mark.parametrize(
    "script",
    [pytest.param(name, marks=NEEDS.get(name, pytest.mark.real_data)) for name in SCRIPTS],
)
def test_quick_run_prints_one_json_object(
    script: str, tmp_path: Path, warm_interpreter: WarmInterpreter
) -> None:
    arguments = ["--quick", "--results-dir", str(tmp_path / "results")]
    completed = warm_interpreter.run(BENCHMARKS / script, arguments, tmp_path, TIMEOUT_S)
    assert completed.returncode == 0, f"{script} failed:\n{completed.stderr[-4000:]}"
    try:
        result = json.loads(completed.stdout)
    except json.JSONDecodeError as error:
        pytest.fail(
            f"{script} did not print one JSON object ({error}):\n{completed.stdout[-2000:]}"
        )
    assert isinstance(result, dict) and result, f"{script} printed {completed.stdout[:200]!r}"
    if "skipped" in result:
        pytest.skip(f"{script}: {result['skipped']}")


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
