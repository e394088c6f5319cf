"""Every benchmark script (benchmarks/*.py) runs its ``--quick`` version, the script's own code
path on tiny settings, and prints one JSON object on stdout: a script broken by a change of the
packages fails here rather than on the day someone measures with it.

Each runs as a user runs it (``python benchmarks/NAME.py --quick``, from the repository root, in
a process of its own) with a temporary ``--results-dir``, so nothing is written into the
checkout. A script that prints ``{"skipped": ...}`` (no real data; gpu_speed.py without
CUDA) is reported as skipped with its reason.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

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


@pytest.mark.slow
@pytest.mark.parametrize(
    "script",
    [pytest.param(name, marks=NEEDS.get(name, pytest.mark.real_data)) for name in SCRIPTS],
)
def test_quick_run_prints_one_json_object(script: str, tmp_path: Path) -> None:
    command = [sys.executable, str(BENCHMARKS / script), "--quick"]
    command += ["--results-dir", str(tmp_path / "results")]
    completed = subprocess.run(
        command,
        cwd=ROOT,
        env=quick_environment(),
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
        check=False,
    )
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
