"""A plain ``pip install`` of the package (no extras: no torch, h5py, Dagster, pandas, requests,
Starlette...) embeds: ``psp embed``, ``psp score`` and ``psp info`` work in a process where the
extras' modules cannot be imported, and give the vectors of the full install (torch's sums)
to float32 rounding, summed by the compiled loop, or by scipy where pip found no C compiler to
build it; a command that needs an extra says which in one line, exit 2. The slow test builds a
real virtual environment without them."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tomllib
from importlib import metadata
from pathlib import Path

import numpy as np
import pytest

from psp_core import load_model
from psp_core.extras import PACKAGE
from psp_core.inference.fast.pooling import COMPILED_MODULE
from tests.conftest import require_shared_data
from tests.psp_core.cli_runs import EXTRAS_MODULES, one_error_line, run_psp_without
from tests.psp_core.fresh_venvs import link_distributions

ROOT = Path(__file__).resolve().parents[3]


def _cosines(got: np.ndarray, want: np.ndarray) -> np.ndarray:
    norms = np.linalg.norm(got, axis=1) * np.linalg.norm(want, axis=1)
    return np.einsum("ij,ij->i", got, want) / np.where(norms > 0, norms, 1)


@pytest.mark.parametrize(
    ("blocked", "backend"),
    [
        (EXTRAS_MODULES, "compiled"),
        # a plain install where pip found no C compiler: scipy sums
        (f"{EXTRAS_MODULES},{COMPILED_MODULE}", "scipy"),
    ],
    ids=["compiled", "no-compiler"],
)
def test_embed_score_and_info_run_without_the_extras(
    tmp_path, bundle, inputs, blocked, backend
) -> None:
    if backend == "compiled":
        pytest.importorskip(COMPILED_MODULE, reason="the compiled sums were not built here")
    vectors, scores = tmp_path / "vectors.npy", tmp_path / "scores.tsv"
    one_line = tmp_path / "one.txt"  # (fewer sentences than pooling.FEW_SENTENCES)
    one_line.write_text("a sentence alone\n", encoding="utf-8")
    commands = [
        ["embed", "--sentence-file", str(one_line), "--model", str(bundle)]
        + ["--output-file", str(tmp_path / "one.npy")],
        ["embed", "--sentence-file", str(inputs["sentences"]), "--model", str(bundle)]
        + ["--output-file", str(vectors)],
        ["score", "--sentence-pair-file", str(inputs["pairs"]), "--model", str(bundle)]
        + ["--output-file", str(scores)],
        ["info", str(bundle)],
    ]
    codes, child = run_psp_without(blocked, commands, tmp_path / "codes.json")
    assert codes == [0, 0, 0, 0], child.stderr
    assert (tmp_path / "codes.json.backend").read_text() == backend
    assert json.loads(child.stdout)["dim"] == 16
    # the same vectors and scores as this process's full install (torch's sums)
    model = load_model(bundle)
    sentences = inputs["sentences"].read_text(encoding="utf-8").splitlines()
    want = model.embed(sentences)
    got = np.load(vectors)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    assert _cosines(got, want).min() >= 0.9999
    one = np.load(tmp_path / "one.npy")
    np.testing.assert_allclose(one, model.embed(["a sentence alone"]), rtol=1e-5, atol=1e-6)
    pairs = [line.split("\t") for line in inputs["pairs"].read_text().splitlines()]
    want_scores = model.score([(a, b) for a, b in pairs])
    got_scores = [float(line.split("\t")[2]) for line in scores.read_text().splitlines()]
    np.testing.assert_allclose(got_scores, want_scores, atol=2e-6)


def test_commands_that_need_an_extra_name_it_in_one_line(tmp_path, bundle, inputs) -> None:
    commands = [
        ["train", "--data", "training.h5", "--spm", "spm.model", "--output", str(tmp_path / "m")],
        ["serve", "--model", f"de={bundle}"],
        ["mine", "--model", str(bundle), "--source-file", str(inputs["sentences"])]
        + ["--target-file", str(inputs["sentences"]), "--output-file", str(tmp_path / "m.tsv")],
        ["evaluate", "--model", str(bundle), "--eval-dir", str(inputs["eval"])]
        + ["--output-json", str(tmp_path / "e.json")],
        ["embed", "--sentence-file", str(inputs["sentences"]), "--model", str(bundle)]
        + ["--output-file", str(tmp_path / "v.npy"), "--device", "cuda"],
    ]
    codes, child = run_psp_without(EXTRAS_MODULES, commands, tmp_path / "codes.json")
    assert codes == [2] * len(commands), child.stderr
    assert "Traceback" not in child.stderr, child.stderr
    errors = [line for line in child.stderr.splitlines() if line.startswith("psp: error:")]
    assert len(errors) == len(commands), child.stderr
    for line, (what, extra) in zip(
        errors,
        [
            ("psp train", "train"),
            ("psp serve", "serve"),
            ("psp mine", "train"),
            ("psp evaluate", "evaluate"),
            ("device 'cuda'", "train"),
        ],
        strict=True,
    ):
        one_error_line(
            line, what, f"needs the [{extra}] extra", f"pip install '{PACKAGE}[{extra}]'"
        )
    names = ["bundle", "codes.json", "codes.json.backend", "eval", "inputs"]
    assert sorted(p.name for p in tmp_path.iterdir()) == names


def test_the_extras_named_in_errors_exist_in_pyproject() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    assert project["name"] == PACKAGE
    extras = project["optional-dependencies"]
    assert {"train", "evaluate", "pipeline", "serve", "all"} <= set(extras)
    base = " ".join(project["dependencies"])
    for heavy in ("torch", "h5py", "dagster", "pandas", "starlette", "uvicorn"):
        assert heavy not in base, f"{heavy} is a base dependency"
    assert any(r.startswith("torch==") for r in extras["train"])


def _base_distributions() -> set[str]:
    """The distributions a plain install brings: pyproject.toml's dependencies and theirs (those
    without an environment marker), as installed here."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    todo = list(project["dependencies"])
    found: set[str] = set()
    while todo:
        requirement = todo.pop()
        name = re.match(r"[A-Za-z0-9._-]+", requirement).group().lower()
        if ";" in requirement or name in found:
            continue
        found.add(name)
        todo.extend(metadata.requires(name) or [])
    return found


@pytest.mark.slow
@pytest.mark.real_data
def test_a_virtual_environment_without_the_extras_gives_the_same_vectors(
    tmp_path, real_en_de_bundles
) -> None:
    """``python -m venv`` (no system packages), the base dependencies at the versions installed
    here (linked, not downloaded), the project installed by pip without extras (pip fetches its
    build backend only; skipped where it cannot): torch cannot
    be imported there, and ``psp embed`` of the shared STS sentences gives this install's
    vectors (cosine >= 0.9999), with no torch in ``sys.modules`` after ``load_model`` and
    ``embed`` from Python, summed by the compiled loop pip built; installed again where no C
    compiler is found, the install succeeds and scipy sums, to the same vectors."""
    sts = require_shared_data("eval", "sts", "2012")
    _, trained = real_en_de_bundles
    sentences = [
        side
        for path in sorted(sts.glob("*.tsv"))
        for line in path.read_text(encoding="utf-8").splitlines()[:300]
        for side in line.split("\t")[1:3]
    ]
    (tmp_path / "sts.txt").write_text("\n".join(sentences) + "\n", encoding="utf-8")
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=300)
    link_distributions(_base_distributions(), tmp_path / "base")
    site = next((venv / "lib").glob("python3*/site-packages"))
    (site / "base-dependencies.pth").write_text(str(tmp_path / "base") + "\n")
    source = tmp_path / "source"  # (pip builds in the source tree: a copy, not the checkout)
    source.mkdir()
    for name in ("pyproject.toml", "setup.py", "README.md", "LICENSE"):
        shutil.copy(ROOT / name, source / name)
    # (the package is psp_core alone, without what the editable install built here: pip
    # compiles its own)
    ignore = shutil.ignore_patterns("__pycache__", "*.so", "*.pyd")
    shutil.copytree(ROOT / "psp_core", source / "psp_core", ignore=ignore)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["PIP_DISABLE_PIP_VERSION_CHECK"] = "1"

    def run(*argv: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            argv, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600
        )

    # (no dependency fetched: only the build backend, from the indexes pip is configured with)
    pip = run(str(venv / "bin" / "pip"), "install", "--no-deps", str(source))
    if pip.returncode != 0 and "No matching distribution found for setuptools" in pip.stderr:
        pytest.skip("pip cannot reach the build backend (setuptools) from here")
    assert pip.returncode == 0, pip.stderr[-3000:]
    assert run(str(venv / "bin" / "python"), "-c", "import torch").returncode != 0
    embed = run(str(venv / "bin" / "psp"), "embed", "--sentence-file", "sts.txt", "--model",
                str(trained), "--output-file", "light.npy")  # fmt: skip
    assert embed.returncode == 0, embed.stderr[-3000:]
    check = (
        "import sys, numpy; from psp_core import load_model; "
        "from psp_core.inference.fast.pooling import backend; "
        f"v = load_model({str(trained)!r}).embed(open('sts.txt').read().splitlines()); "
        "numpy.save('api.npy', v); print(sorted(m for m in sys.modules if m == 'torch'), "
        "backend())"
    )
    api = run(str(venv / "bin" / "python"), "-c", check)
    assert api.returncode == 0, api.stdout + api.stderr[-3000:]
    # (pip compiled the sums where a C compiler is found, as here; else scipy sums)
    want_backend = "compiled" if shutil.which("cc") or shutil.which("gcc") else "scipy"
    assert api.stdout.split() == ["[]", want_backend], api.stdout
    # the same install where pip finds no C compiler: it succeeds, and scipy sums
    no_compiler = {**env, "CC": "/bin/false"}
    shutil.rmtree(source / "build", ignore_errors=True)  # (else setuptools reuses its module)
    again = subprocess.run(
        [str(venv / "bin" / "pip"), "install", "--no-deps", "--force-reinstall", str(source)],
        cwd=tmp_path, env=no_compiler, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert again.returncode == 0, again.stderr[-3000:]
    scipy_sums = run(str(venv / "bin" / "python"), "-c", check.replace("api.npy", "scipy.npy"))
    assert scipy_sums.stdout.split() == ["[]", "scipy"], scipy_sums.stdout + scipy_sums.stderr
    want = load_model(trained).embed(sentences)  # this install: torch's sums
    for name in ("light.npy", "api.npy", "scipy.npy"):
        got = np.load(tmp_path / name)
        assert got.shape == want.shape
        assert _cosines(got, want).min() >= 0.9999, name


@pytest.mark.skipif(
    not __import__("psp_core.devices").devices.cuda_driver_absent(),
    reason="a CUDA driver is present here: --device auto asks torch",
)
@pytest.mark.parametrize("lines", [1, 1000])
def test_lines_embedded_with_torch_installed_do_not_import_it(tmp_path, bundle, lines) -> None:
    """Where torch is installed but no CUDA driver is, ``psp embed`` on ``auto`` (one thread)
    imports neither torch, scipy nor pandas (which pyarrow imports on first use where it is
    installed), for one line (fewer than pooling.FEW_SENTENCES) as for a thousand (the
    compiled loop's sums): their imports cost more than the work; the vectors are the ones
    torch's sums give."""
    texts = [f"sentence number {i} of a few" for i in range(lines)]
    sentences = tmp_path / "lines.txt"
    sentences.write_text("".join(f"{text}\n" for text in texts), encoding="utf-8")
    output = tmp_path / "vectors.npy"
    script = (
        "import sys; from psp_core.cli.main import main\n"
        "try:\n    main(sys.argv[1:])\nexcept SystemExit as e:\n    assert not e.code, e.code\n"
        "print(sorted(m for m in ('torch', 'scipy', 'pandas') if m in sys.modules))"
    )
    command = ["embed", "--sentence-file", str(sentences), "--model", str(bundle)]
    command += ["--output-file", str(output)]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    child = subprocess.run(
        [sys.executable, "-c", script, *command], capture_output=True, text=True, env=env
    )
    assert child.returncode == 0, child.stderr[-2000:]
    light = [] if lines == 1 or _compiled_built() else ["scipy"]
    assert child.stdout.strip().splitlines()[-1] == str(light)
    want = load_model(bundle).embed(texts)
    np.testing.assert_allclose(np.load(output), want, rtol=1e-5, atol=1e-6)


def _compiled_built() -> bool:
    from psp_core.extras import optional_module

    return optional_module(COMPILED_MODULE) is not None


#: in a fresh process, the Python API as a careless caller uses it: many sentences, a float16
#: table, scores, forked workers, normalized and cut vectors; whether torch was imported
API_WITHOUT_TORCH = """
import sys
from psp_core import load_model
model = load_model(sys.argv[1])
texts = [f"sentence number {i} of a thousand" for i in range(1000)]
model.embed(texts, normalize=True, dim=8)
model.encode(texts[0])
model.score([(a, b) for a, b in zip(texts, reversed(texts))])
load_model(sys.argv[1], dtype="float16").embed(texts)
load_model(sys.argv[1], workers=2).embed(texts * 20)
print("torch" in sys.modules)
"""


def test_the_python_api_on_one_thread_never_imports_torch(bundle) -> None:
    """docs/python-api.md: embedding on one thread never imports torch, even where it is
    installed; each way into the sums a caller may take."""
    child = subprocess.run(
        [sys.executable, "-c", API_WITHOUT_TORCH, str(bundle)],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert child.returncode == 0, child.stderr[-2000:]
    assert child.stdout.strip().splitlines()[-1] == "False"


def test_psp_info_and_verbose_embed_name_the_sums_in_use(tmp_path, bundle) -> None:
    """docs/python-api.md: ``psp info`` says which sums run (``sentence_sums``), and so does
    ``psp -v embed``; where the compiled loop is made unimportable (no C compiler at
    install), both say scipy."""
    sentences = tmp_path / "lines.txt"
    sentences.write_text("".join(f"line {i} here\n" for i in range(100)), encoding="utf-8")
    embed = ["-v", "embed", "--sentence-file", str(sentences), "--model", str(bundle)]
    embed += ["--output-file", str(tmp_path / "v.npy")]
    for blocked, words in (
        (EXTRAS_MODULES, "compiled loop"),
        (f"{EXTRAS_MODULES},{COMPILED_MODULE}", "scipy"),
    ):
        if words == "compiled loop" and not _compiled_built():
            continue
        codes, child = run_psp_without(
            blocked,
            [embed, ["info", str(bundle)]],
            tmp_path / "codes.json",  # (-v first: it sets up logging)
        )
        assert codes == [0, 0], child.stderr
        assert words in json.loads(child.stdout)["sentence_sums"]
        (logged,) = [line for line in child.stderr.splitlines() if "sentence sums:" in line]
        assert words in logged
