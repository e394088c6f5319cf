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
