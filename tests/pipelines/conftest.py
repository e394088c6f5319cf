"""Fixtures for the Dagster tests: the loopback OPUS server (shared with tests/ops) and
resources pointed at temporary directories and that server."""

from __future__ import annotations

from pathlib import Path

import pytest

from assets.settings.profiles import ProfileResource
from assets.settings.resources import (
    ComputeResource,
    EvaluationDataResource,
    LanguageIdResource,
    OpusResource,
    ParaNmtResource,
    StorageResource,
)
from tests.ops.conftest import opus_server  # noqa: F401  (the fixture, reused)
from tests.ops.opus_server import OpusServer
from tests.pipelines.dagster_cli import warm_run_interpreter


@pytest.fixture(scope="session")
def warm_runs():
    """One warm interpreter per test process for the tests' ``dagster job execute`` runs
    (``Runs(warm_runs)``), started by the first test that asks for it."""
    with warm_run_interpreter() as warm:
        yield warm


def loopback_resources(
    server: OpusServer, root: Path, eval_dir: Path, paranmt_url: str | None = None
) -> dict:
    """Real resources aimed at ``server`` and temporary directories (no retry pauses)."""
    return {
        "storage": StorageResource(root=str(root)),
        "opus": OpusResource(api_base=server.api_url, retries=1, backoff=0.01, timeout=10),
        "paranmt": ParaNmtResource(
            url=paranmt_url or f"{server.base_url}/para-nmt-50m.zip", retries=1, backoff=0.01
        ),
        "langid": LanguageIdResource(),
        "compute": ComputeResource(device="cpu", threads=1, workers=1),
        "eval_data": EvaluationDataResource(eval_dir=str(eval_dir)),
        # the paper's settings unless a run's config picks a profile (configs/smoke.yaml)
        "profile": ProfileResource(),
    }


@pytest.fixture()
def storage_root(tmp_path: Path) -> Path:
    return tmp_path / "storage"


#: A language partition's assets, in pipeline order.
LANGUAGE_STAGES = [
    "raw_pairs",
    "langid_filtered_pairs",
    "length_filtered_pairs",
    "deduplicated_pairs",
    "retrain_plan",
    "sentencepiece_model",
    "training_data",
    "psp_model",
    "model_evaluation",
]
