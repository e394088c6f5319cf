"""What the model watch does when the promoted model cannot be served: a damaged promotion, a
``promoted`` link that points nowhere, the served version deleted or overwritten on disk. The
good model goes on serving, the problem is logged once and shown by ``/health``."""

from __future__ import annotations

import logging
import os
import shutil
import time

import pytest
import torch
from starlette.testclient import TestClient

from psp_core.models.registry import ModelRegistry
from psp_core.serving.app import create_app
from psp_core.serving.models import ModelSet
from tests.psp_core.models.test_registry import damage
from tests.psp_core.serving.test_serve import Server, httpx, two_versions  # noqa: F401

INTERVAL = 0.05


@pytest.fixture()
def registry(tmp_path, model):
    """A registry with two versions, the first promoted."""
    registry = ModelRegistry(tmp_path / "de")

    def build(path):
        model.save(path)
        return {}

    registry.add_version("a" * 24, build)
    with torch.no_grad():
        model.weight.mul_(-1.5)
    registry.add_version("b" * 24, build)
    registry.promote(registry.versions()[0].id, reason="first")
    return registry


def link_by_hand(registry: ModelRegistry, version_id: str) -> None:
    """Point ``promoted`` at a version as a hand-made link (or an older psp) would, unchecked."""
    link = registry.root / ".promoted.by-hand"
    os.symlink(f"versions/{version_id}", link)
    os.replace(link, registry.root / "promoted")


def wait_for(condition, seconds: float = 20.0):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(0.02)
    raise AssertionError("the watch did not notice in time")


@pytest.fixture()
def watched(registry):
    models = ModelSet({"de": registry.root})
    models.watch(INTERVAL)
    yield models
    models.stop()


def errors_of(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]


def test_a_damaged_promotion_is_logged_once_and_the_good_model_serves_on(registry, watched, caplog):
    first, second = registry.versions()
    damage(second.bundle)
    with caplog.at_level(logging.INFO, logger="psp_core.serving.models"):
        link_by_hand(registry, second.id)
        problem = wait_for(lambda: watched.problems().get("de"))
        time.sleep(20 * INTERVAL)  # twenty more ticks: no second line
    assert f"version {second.id} cannot be loaded" in problem and "truncated" in problem
    assert f"still serving {first.id}" in problem
    # the path from the registry's folder: /health answers without a key; the log has it whole
    assert f"(de/versions/{second.id}/model/embeddings.safetensors: size " in problem
    assert str(registry.root) not in problem
    [logged] = errors_of(caplog)
    assert logged.startswith(f"de: version {second.id} cannot be loaded ({second.bundle}")
    assert watched.get("de").version == first.id
    assert watched.get("de").model.embed(["still answers"]).shape == (1, 16)

    health = TestClient(create_app(watched)).get("/health")
    assert health.status_code == 200
    body = health.json()
    assert body["status"] == "degraded" and body["problems"] == {"de": problem}
    assert body["models"] == {"de": first.id}

    # rolled back by hand to the served version: healthy again, said once
    with caplog.at_level(logging.INFO, logger="psp_core.serving.models"):
        link_by_hand(registry, first.id)
        wait_for(lambda: not watched.problems())
    assert "de: resolved, serving " + first.id in caplog.text
    assert TestClient(create_app(watched)).get("/health").json()["status"] == "ok"


def test_a_promoted_link_that_points_nowhere_is_noticed(registry, watched, caplog):
    first = registry.versions()[0]
    with caplog.at_level(logging.ERROR, logger="psp_core.serving.models"):
        link_by_hand(registry, "20990101T000000Z-gone")
        problem = wait_for(lambda: watched.problems().get("de"))
        time.sleep(10 * INTERVAL)
    assert "de/promoted points to versions/20990101T000000Z-gone, which is not there" in problem
    assert f"still serving {first.id} from memory" in problem
    assert len(errors_of(caplog)) == 1


def test_the_served_version_deleted_or_overwritten_on_disk_is_noticed(registry, watched, caplog):
    first, second = registry.versions()
    weights = first.bundle / "embeddings.safetensors"
    with caplog.at_level(logging.ERROR, logger="psp_core.serving.models"):
        weights.write_bytes(weights.read_bytes()[:-64] + bytes(64))  # same size, other bytes
        problem = wait_for(lambda: watched.problems().get("de"))
        time.sleep(10 * INTERVAL)
    assert f"the files of version {first.id} do not verify" in problem
    assert "checksum" in problem and "a restart could not load it" in problem
    assert len(errors_of(caplog)) == 1
    assert watched.get("de").version == first.id  # the copy in memory serves on

    shutil.rmtree(first.directory)
    problem = wait_for(
        lambda: "not there" in watched.problems().get("de", "") and watched.problems()["de"]
    )
    assert f"promoted points to versions/{first.id}, which is not there" in problem


def test_a_served_bundle_folder_deleted_is_noticed(tmp_path, model):
    """A plain bundle served by --model NAME=PATH: its folder deleted shows in /health."""
    bundle = model.save(tmp_path / "bundle")
    models = ModelSet({"de": bundle})
    models.watch(INTERVAL)
    try:
        shutil.rmtree(bundle)
        problem = wait_for(lambda: models.problems().get("de"))
    finally:
        models.stop()
    assert "do not verify" in problem and "is not a directory" in problem


def test_a_model_of_an_earlier_release_is_served_where_it_is(tmp_path, model):
    """A registry folder from before versions (``model/`` a bundle): served as it is; the
    server renames nothing in the storage it reads."""
    root = tmp_path / "de"
    model.save(root / "model")
    models = ModelSet({"de": root})
    try:
        assert models.get("de") is not None
    finally:
        models.stop()
    assert sorted(p.name for p in root.iterdir()) == ["model"]
    assert not (root / "model").is_symlink()


def test_health_is_503_only_when_nothing_can_be_served():
    class NothingServed:
        swaps = 0

        def names(self):
            return []

        def get(self, name):
            return None

        def problems(self):
            return {"de": "version X cannot be loaded (...); nothing served"}

    response = TestClient(create_app(NothingServed())).get("/health")
    assert response.status_code == 503
    assert response.json()["status"] == "unavailable" and response.json()["problems"]


def test_a_folder_with_no_model_at_the_start_is_named_with_what_it_lacks(tmp_path):
    """``psp serve --model de=EMPTY_DIR`` said only "none of ['de'] has a model to serve yet"."""
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(ValueError) as error:
        ModelSet({"de": empty})
    message = str(error.value)
    assert f"de: {empty} holds neither a model bundle (config.json is missing)" in message
    assert "nor a promoted version (promoted -> versions/ID" in message


def test_a_promoted_link_that_points_nowhere_at_the_start_says_so(registry):
    link_by_hand(registry, "20990101T000000Z-gone")
    with pytest.raises(ValueError, match="none of .* has a model to serve yet .*points to "):
        ModelSet({"de": registry.root})


@pytest.mark.slow
def test_psp_serve_shows_each_problem_in_health_and_logs_it_once(two_versions):  # noqa: F811
    """The real server, one reload interval of 0.2 s: a damaged promotion, then the served
    version's folder deleted under its ``promoted`` link."""
    storage, registry, first, second = two_versions
    server = Server("--storage-root", str(storage), "--reload-interval", "0.2")

    def health() -> dict:
        return httpx.get(f"{server.url}/health", timeout=10).json()

    try:
        damage(second.bundle)
        link_by_hand(registry, second.id)
        degraded = wait_for(lambda: health()["problems"] and health())
        assert degraded["status"] == "degraded" and degraded["models"] == {"de": first.id}
        assert f"version {second.id} cannot be loaded" in degraded["problems"]["de"]
        time.sleep(2.0)  # ten more intervals
        answer = server.client().embeddings.create(model="de", input=["still served"])
        assert len(answer.data[0].embedding) == 16

        link_by_hand(registry, first.id)
        wait_for(lambda: health()["status"] == "ok")
        shutil.rmtree(first.directory)
        gone = wait_for(lambda: health()["problems"].get("de"))
        assert f"promoted points to versions/{first.id}, which is not there" in gone
        assert server.client().embeddings.create(model="de", input=["from memory"]).data
    finally:
        err = server.stop()
    logged = [line for line in err.splitlines() if " ERROR psp_core.serving.models: de: " in line]
    # each once (a tick in the middle of the deletion may also see the files half gone)
    assert sum("cannot be loaded" in line for line in logged) == 1, err[-3000:]
    assert sum("which is not there" in line for line in logged) == 1, err[-3000:]
    assert f" {server.process.pid} ERROR " in logged[0]  # time, pid, level
    assert "Traceback" not in err
