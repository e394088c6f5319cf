"""Every benchmark script (benchmarks/*.py) runs its ``--quick`` version, the script's own code
path on tiny settings, and prints one JSON object on stdout: a script broken by a change of the
packages fails here rather than on the day someone measures with it. A script whose own test
already runs its quick version and reads its JSON (``RUN_ELSEWHERE``) is not run a second time.

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
#: scripts whose quick run another test makes and reads (it would run here a second time)
RUN_ELSEWHERE = {"retrain_weeks.py": ROOT / "tests" / "test_retrain_weeks.py"}
SCRIPTS = sorted(
    path.name
    for path in BENCHMARKS.glob("*.py")
    if not path.name.startswith("_") and path.name not in RUN_ELSEWHERE
)
#: what the scripts need beside the project (a GPU for gpu_speed.py, the shared data for the rest)
NEEDS = {"gpu_speed.py": pytest.mark.gpu}
TIMEOUT_S = 180


def quick_environment() -> dict[str, str]:
    """This interpreter's environment (its one OpenMP thread from ``tests/conftest.py`` among
    it), with the checkout first on ``PYTHONPATH`` (the scripts import ``psp_core``, ``ops``...
    from whatever checkout runs them) and no bytecode written beside the scripts."""
    path = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
    return os.environ | {"PYTHONPATH": path, "PYTHONDONTWRITEBYTECODE": "1"}


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


@pytest.mark.parametrize("script", sorted(RUN_ELSEWHERE))
def test_a_script_left_out_here_has_its_quick_run_read_by_its_own_test(script: str) -> None:
    """Each script left out above exists, and its test runs it with ``--quick`` and parses the
    JSON it prints."""
    assert (BENCHMARKS / script).is_file()
    text = RUN_ELSEWHERE[script].read_text(encoding="utf-8")
    assert f'"{script}"' in text and '"--quick"' in text and "json.loads(" in text
