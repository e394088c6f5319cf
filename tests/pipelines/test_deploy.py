"""The Kubernetes deployment (deploy/), tested offline: no cluster or image build here, so the
checks are what the files promise: the image installs what `make` installs and serves the code
location, the run and step pods all mount the shared storage root, and the code location loads
with the Kubernetes step executor."""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
DOCKERFILE = (ROOT / "deploy" / "Dockerfile").read_text()
VALUES = yaml.safe_load((ROOT / "deploy" / "helm" / "values.yaml").read_text())


def _env(entries: list) -> dict[str, str]:
    return {e["name"]: e["value"] for e in entries}


def test_the_image_pins_what_make_installs_and_serves_the_code_location() -> None:
    makefile = (ROOT / "Makefile").read_text()
    torch_pin = re.search(r"torch==[\d.]+", makefile).group(0)
    assert f"pip install {torch_pin}" in DOCKERFILE
    extras = re.search(r"pip install -e '\.\[([^\]]+)\]'", DOCKERFILE).group(1).split(",")
    assert {"cluster", "k8s"} <= set(extras)
    assert "fasttext-numpy2" in DOCKERFILE  # the same binding fix as make install
    packages = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    for pattern in packages["packages"]["find"]["include"]:
        assert f"COPY {pattern.rstrip('*')} " in DOCKERFILE, pattern
    # the pipeline is not in the wheel: it runs from the copied checkout, on PYTHONPATH
    workdir = re.search(r"^WORKDIR (\S+)", DOCKERFILE, re.MULTILINE).group(1)
    assert f"PYTHONPATH={workdir} " in DOCKERFILE
    for folder in ("ops", "assets", "pipelines", "configs"):
        assert f"COPY {folder} ./{folder}" in DOCKERFILE, folder
    for name in ("setup.py", "LICENSE"):  # what pip reads to build the package
        assert re.search(rf"^COPY [^\n]*\b{name}\b", DOCKERFILE, re.MULTILINE), name
    assert '"--module-name", "pipelines.definitions"' in DOCKERFILE
    assert "PSP_EXECUTOR=k8s" in DOCKERFILE


def test_run_and_step_pods_share_the_storage_root_volume() -> None:
    (deployment,) = VALUES["dagster-user-deployments"]["deployments"]
    env = _env(deployment["env"])
    assert env["PSP_EXECUTOR"] == "k8s"
    assert deployment["dagsterApiGrpcArgs"] == ["--module-name", "pipelines.definitions"]
    (mount,) = deployment["volumeMounts"]
    assert env["PSP_STORAGE_ROOT"].startswith(mount["mountPath"] + "/")
    claim = {v["name"]: v["persistentVolumeClaim"]["claimName"] for v in deployment["volumes"]}
    launcher = VALUES["runLauncher"]
    assert launcher["type"] == "K8sRunLauncher"
    config = launcher["config"]["k8sRunLauncher"]
    # k8s_job_executor's step pods take the run launcher's volumes and environment
    assert config["volumeMounts"] == deployment["volumeMounts"]
    launched = {v["name"]: v["persistentVolumeClaim"]["claimName"] for v in config["volumes"]}
    assert launched == claim
    assert f"PSP_STORAGE_ROOT={env['PSP_STORAGE_ROOT']}" in config["envVars"]
    pvc = yaml.safe_load((ROOT / "deploy" / "helm" / "psp-data-pvc.yaml").read_text())
    assert pvc["metadata"]["name"] in claim.values()
    assert pvc["spec"]["accessModes"] == ["ReadWriteMany"]  # every pod, on any node


def _executor_name(value: str) -> subprocess.CompletedProcess:
    code = (
        "from pipelines.definitions import defs; "
        "print(defs.resolve_job_def('psp_language_job').executor_def.name)"
    )
    env = os.environ | {"PSP_EXECUTOR": value, "PYTHONPATH": str(ROOT)}
    return subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True
    )


@pytest.mark.slow
@pytest.mark.skipif(
    importlib.util.find_spec("dagster_k8s") is None,
    reason="dagster-k8s is not installed (pip install -e '.[k8s]')",
)
def test_the_code_location_loads_with_the_kubernetes_step_executor() -> None:
    done = _executor_name("k8s")
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip().splitlines()[-1] == "k8s"
    wrong = _executor_name("celery-ish")
    assert wrong.returncode != 0 and "PSP_EXECUTOR='celery-ish'" in wrong.stderr
