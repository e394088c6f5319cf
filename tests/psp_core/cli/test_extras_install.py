"""What ``pip install`` puts in site-packages, and each extra alone.

The wheel and the sdist of this checkout hold the library (``psp_core``, its ``py.typed``), the
LICENSE and the metadata; never a bare ``ops``, ``assets`` or ``pipelines`` package. Each extra,
installed alone into a fresh virtual environment beside the wheel, runs its commands there: an
extra that forgot a module its code imports (``[serve]`` without httptools once did) fails here.

The environments take the distributions installed here (linked: the same versions, no network):
for each extra, those its requirements name, and theirs, markers evaluated, nothing else.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import tarfile
import time
import tomllib
import urllib.request
import zipfile
from importlib import metadata
from pathlib import Path

import numpy as np
import pytest
from packaging.markers import default_environment
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from psp_core import load_model
from tests.loopback_http import serving_folder
from tests.psp_core.cli_runs import command
from tests.psp_core.fresh_venvs import link_distributions

ROOT = Path(__file__).resolve().parents[3]
PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
NAME = canonicalize_name(PROJECT["name"])
#: what the distribution is built from (everything else is the application around it)
SOURCES = ("pyproject.toml", "setup.py", "README.md", "LICENSE", "psp_core")


def requirement_closure(requirements: list[str]) -> set[str]:
    """The distributions ``requirements`` need, recursively, as installed here: markers
    evaluated for this interpreter, an ``extra ==`` marker for the extras asked for, this
    project's own extras (``psp-pipeline[train]``) expanded."""
    environment = default_environment()
    found: set[tuple[str, str]] = set()  # (distribution, extra or "")
    todo = [(text, "") for text in requirements]
    while todo:
        text, extra = todo.pop()
        requirement = Requirement(text)
        marker = requirement.marker
        if marker is not None and not marker.evaluate({**environment, "extra": extra}):
            continue
        name = canonicalize_name(requirement.name)
        if name == NAME:
            extras = PROJECT["optional-dependencies"]
            todo += [(t, "") for wanted in requirement.extras for t in extras[wanted]]
            continue
        for wanted in ("", *requirement.extras):
            if (name, wanted) in found:
                continue
            found.add((name, wanted))
            todo += [(t, wanted) for t in metadata.requires(name) or []]
    return {name for name, _ in found}


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> dict[str, Path]:
    """The wheel and the sdist of a copy of the checkout's sources (pip builds in its source
    tree), with this interpreter's setuptools."""
    folder = tmp_path_factory.mktemp("dist")
    source = folder / "source"
    source.mkdir()
    for name in SOURCES:
        if (ROOT / name).is_dir():
            ignore = shutil.ignore_patterns("__pycache__", "*.so", "*.pyd")
            shutil.copytree(ROOT / name, source / name, ignore=ignore)
        else:
            shutil.copy(ROOT / name, source / name)
    dist = folder / "dist"
    build = [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation"]
    done = subprocess.run(
        [*build, "--wheel-dir", str(dist), str(source)],
        capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    sdist = "import setuptools.build_meta as b, sys; print(b.build_sdist(sys.argv[1]))"
    done = subprocess.run(
        [sys.executable, "-c", sdist, str(dist)], cwd=source, capture_output=True, text=True,
        timeout=600,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    return {"wheel": next(dist.glob("*.whl")), "sdist": next(dist.glob("*.tar.gz"))}


def test_the_wheel_and_sdist_hold_the_library_its_license_and_type_marker(built) -> None:
    with zipfile.ZipFile(built["wheel"]) as wheel:
        names = wheel.namelist()
        info = next(n.split("/")[0] for n in names if n.endswith(".dist-info/METADATA"))
        meta = wheel.read(f"{info}/METADATA").decode()
    assert {name.split("/")[0] for name in names} == {"psp_core", info}
    assert "psp_core/py.typed" in names and f"{info}/licenses/LICENSE" in names
    assert "License-Expression: MIT" in meta and "Classifier: Typing :: Typed" in meta
    with tarfile.open(built["sdist"]) as sdist:
        members = {m.name.split("/", 1)[-1] for m in sdist.getmembers()}
    assert {
        "LICENSE",
        "psp_core/py.typed",
        "setup.py",
        "psp_core/inference/fast/_sums.c",
    } <= members
    assert not {m.split("/")[0] for m in members} & {"ops", "assets", "pipelines", "tests"}


def fresh_environment(folder: Path, wheel: Path, requirements: list[str]) -> Path:
    """A venv (no system packages) with ``wheel`` installed and the distributions of
    ``requirements`` linked in; returns its ``bin`` folder."""
    venv = folder / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    link_distributions(requirement_closure(requirements), folder / "linked")
    site = next((venv / "lib").glob("python3*/site-packages"))
    (site / "linked-dependencies.pth").write_text(f"{folder / 'linked'}\n")
    pip = [sys.executable, "-m", "pip", "--python", str(venv / "bin" / "python"), "install"]
    done = subprocess.run(
        [*pip, "--no-deps", "--no-index", str(wheel)], capture_output=True, text=True,
        timeout=600, env=_clean_environment(),
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    return venv / "bin"


def _clean_environment() -> dict[str, str]:
    drop = {"PYTHONPATH", "VIRTUAL_ENV"}
    environment = {k: v for k, v in os.environ.items() if k not in drop}
    return environment | {"PIP_DISABLE_PIP_VERSION_CHECK": "1"}


def run_in(bin_dir: Path, program: str, *argv: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [str(bin_dir / program), *argv], cwd=cwd, env=_clean_environment(),
        capture_output=True, text=True, timeout=600,
    )  # fmt: skip


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _serve_one_request(bin_dir: Path, bundle: Path, cwd: Path) -> list[float]:
    """``psp serve`` of ``bundle`` from the environment; one embeddings request's vector."""
    port = _free_port()
    server = subprocess.Popen(
        [str(bin_dir / "psp"), "serve", "--model", f"de={bundle}", "--port", str(port)],
        cwd=cwd, env=_clean_environment(), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
        text=True,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 120
        while True:
            assert server.poll() is None, server.stderr.read()[-3000:]
            assert time.monotonic() < deadline, "psp serve did not answer in 120 s"
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2):
                    break
            except OSError:
                time.sleep(0.2)
        body = json.dumps({"model": "de", "input": ["a sentence"]}).encode()
        request = urllib.request.Request(
            f"http://127.0.0.1:{port}/v1/embeddings", data=body,
            headers={"Content-Type": "application/json"},
        )  # fmt: skip
        with urllib.request.urlopen(request, timeout=60) as answer:
            return json.loads(answer.read())["data"][0]["embedding"]
    finally:
        server.terminate()
        server.communicate(timeout=30)


def _import_every_module(bin_dir: Path, packages: tuple[str, ...], skip: str, cwd: Path) -> None:
    """Import each module of ``packages`` in the environment, but those named ``skip...``."""
    code = (
        "import importlib, pkgutil, sys\n"
        "skip, imported = sys.argv[1], 0\n"
        "for name in sys.argv[2:]:\n"
        "    package = importlib.import_module(name)\n"
        "    for info in pkgutil.walk_packages(package.__path__, name + '.'):\n"
        "        if not (skip and info.name.startswith(skip)):\n"
        "            importlib.import_module(info.name)\n"
        "            imported += 1\n"
        "print(imported)\n"
    )
    done = run_in(bin_dir, "python", "-c", code, skip, *packages, cwd=cwd)
    assert done.returncode == 0, done.stderr[-3000:]
    assert int(done.stdout) > 50  # (the pipeline's modules, not an empty walk)


@pytest.mark.slow
@pytest.mark.parametrize(
    "extras", ["", "evaluate", "train", "serve", "export", "hub", "pipeline", "pipeline,cluster"]
)
def test_each_extra_alone_runs_its_commands(
    extras, built, tmp_path, bundle, inputs, train_inputs, monkeypatch
) -> None:
    requirements = list(PROJECT["dependencies"])
    if extras:
        requirements.append(f"{PROJECT['name']}[{extras}]")
    extra = extras.split(",")[0] or "none"
    bin_dir = fresh_environment(tmp_path, built["wheel"], requirements)
    version = run_in(bin_dir, "psp", "--version", cwd=tmp_path)
    assert version.stdout.strip() == f"psp {PROJECT['version']}", version.stderr
    out = tmp_path / "out"
    out.mkdir()

    def psp(name: str, **paths) -> subprocess.CompletedProcess:
        argv = command(name, bundle, {**inputs, **train_inputs}, out / name, **paths)
        return run_in(bin_dir, "psp", *argv, cwd=tmp_path)

    if extra == "none":  # what a plain install promises (tests/.../test_light_install.py)
        api = run_in(bin_dir, "python", "-c", "import psp_core; print(psp_core.__version__)",
                     cwd=tmp_path)  # fmt: skip
        assert api.stdout.strip() == PROJECT["version"], api.stderr
        done = psp("embed")
        assert done.returncode == 0, done.stderr[-3000:]
        np.testing.assert_allclose(
            np.load(out / "embed"), load_model(bundle).embed(
                inputs["sentences"].read_text(encoding="utf-8").splitlines()
            ), rtol=1e-5, atol=1e-6,
        )  # fmt: skip
    elif extra == "evaluate":
        done = psp("evaluate")
        assert done.returncode == 0, done.stderr[-3000:]
        assert json.loads((out / "evaluate").read_text())["sts17"]["en-en"]["n"] == 40
        # a mirror that answers 404: the download's own error, not a missing module
        (tmp_path / "empty").mkdir()
        with serving_folder(tmp_path / "empty") as url:
            sources = tmp_path / "sources.json"
            sources.write_text(json.dumps({"x.zip": {"url": f"{url}/x.zip", "format": "stsb"}}))
            fetch = psp("fetch-eval-data", sources=sources)
        assert fetch.returncode == 2 and "404" in fetch.stderr, fetch.stderr[-3000:]
    elif extra == "train":
        for name in ("train", "mine"):
            done = psp(name)
            assert done.returncode == 0, f"psp {name}: {done.stderr[-3000:]}"
        assert (out / "train" / "config.json").is_file() and (out / "mine").stat().st_size
    elif extra == "serve":
        vector = _serve_one_request(bin_dir, bundle, tmp_path)
        want = load_model(bundle).embed(["a sentence"], normalize=True)[0]  # (as OpenAI's are)
        np.testing.assert_allclose(vector, want, rtol=1e-5, atol=1e-6)
    elif extra == "export":
        done = run_in(bin_dir, "psp", "export", "--model", str(bundle), "--format",
                      "model2vec", "--output", str(out / "m2v"), cwd=tmp_path)  # fmt: skip
        assert done.returncode == 0, done.stderr[-3000:]
    elif extra == "hub":  # a bundle in a Hub cache laid out as huggingface_hub writes it
        from tests.psp_core.models.test_hub import add_revision, bundle_files

        cache = tmp_path / "hub-cache"
        add_revision(cache, "org/de", bundle_files(bundle))
        monkeypatch.setenv("HF_HUB_CACHE", str(cache))
        monkeypatch.setenv("HF_HUB_OFFLINE", "1")
        done = run_in(bin_dir, "psp", "info", "hf://org/de", cwd=tmp_path)
        assert done.returncode == 0, done.stderr[-3000:]
        assert json.loads(done.stdout)["hub_id"] == "hf://org/de"
    else:  # the pipeline runs from its checkout (make install's .pth): every module imports,
        # those of the Celery executor with the cluster extra only
        site = next((bin_dir.parent / "lib").glob("python3*/site-packages"))
        (site / "checkout.pth").write_text(f"{ROOT}\n")
        skip = "" if "cluster" in extras else "pipelines.celery_"
        _import_every_module(bin_dir, ("ops", "assets", "pipelines"), skip, tmp_path)
