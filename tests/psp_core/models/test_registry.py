"""Model versions: written whole, promoted and rolled back atomically, pruned without losing the
promoted model or its rollback target, and adopted from the layout before versions."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading

import numpy as np
import pytest
import torch

from psp_core.cli import main
from psp_core.inference.model import load_model
from psp_core.models.registry import DamagedVersion, ModelRegistry, RegistryError, retrain_record


@pytest.fixture()
def two_models(model):
    """Two models of one tokenizer whose vectors differ (the old and the new training)."""
    first = model.weight.detach().clone()
    with torch.no_grad():
        model.weight.mul_(-2.0)
    second = model.weight.detach().clone()

    def save_with(weights):
        def build(path):
            with torch.no_grad():
                model.weight.copy_(weights)
            model.save(path)
            return {"record": {"lr": 0.001}, "dev_scores": {"sts17_en_en": 80.0}}

        return build

    return save_with(first), save_with(second), first, second


def table_of(path) -> np.ndarray:
    return load_model(path).weight.detach().numpy()


def test_a_version_is_written_whole_and_found_by_fingerprint(tmp_path, two_models):
    registry = ModelRegistry(tmp_path / "de")
    build_old, build_new, old, new = two_models
    first = registry.add_version("a" * 24, build_old, created=1_700_000_000)
    second = registry.add_version("b" * 24, build_new, created=1_700_000_000)

    assert first.id == "20231114T221320Z-aaaaaaaa"
    assert second.id == "20231114T221320Z-bbbbbbbb"
    assert [v.id for v in registry.versions()] == [first.id, second.id]
    assert registry.find("b" * 24) == second
    assert registry.find("c" * 24) is None
    info = json.loads((second.directory / "version.json").read_text())
    assert info["fingerprint"] == "b" * 24 and info["dev_scores"] == {"sts17_en_en": 80.0}
    np.testing.assert_array_equal(table_of(second.bundle), new.numpy())
    assert registry.promoted() is None  # adding does not promote


def test_a_failed_build_leaves_no_version(tmp_path, two_models):
    registry = ModelRegistry(tmp_path / "de")

    def fails(path):
        two_models[0](path)
        raise RuntimeError("training diverged")

    with pytest.raises(RuntimeError, match="diverged"):
        registry.add_version("a" * 24, fails)
    assert registry.versions() == []
    assert os.listdir(registry.versions_dir) == []


def test_a_killed_build_is_cleaned_by_the_next(tmp_path, two_models):
    registry = ModelRegistry(tmp_path / "de")
    registry.versions_dir.mkdir(parents=True)
    finished = subprocess.Popen(["true"])
    finished.wait()
    orphan = registry.versions_dir / f".20231114T221320Z-aaaaaaaa.tmp-{finished.pid}"
    two_models[0](orphan / "model")  # what a kill -9 during training's last write leaves
    version = registry.add_version("a" * 24, two_models[1])
    assert sorted(os.listdir(registry.versions_dir)) == [version.id]


def test_promote_rollback_and_the_model_link(tmp_path, two_models):
    registry = ModelRegistry(tmp_path / "de")
    build_old, build_new, old, new = two_models
    first = registry.add_version("a" * 24, build_old)
    second = registry.add_version("b" * 24, build_new)
    with pytest.raises(RegistryError, match="nothing to roll back|no promoted version"):
        registry.rollback()

    registry.promote(first.id, reason="first version")
    with pytest.raises(RegistryError, match="first promoted version"):
        registry.rollback()
    np.testing.assert_array_equal(table_of(tmp_path / "de" / "model"), old.numpy())

    registry.promote(second.id, reason="gate passed", scores={"sts17_en_en": [80.0, 81.0]})
    assert registry.promoted() == second
    assert registry.previous() == first
    np.testing.assert_array_equal(table_of(tmp_path / "de" / "model"), new.numpy())

    assert registry.rollback() == first
    assert registry.promoted() == first
    np.testing.assert_array_equal(table_of(tmp_path / "de" / "model"), old.numpy())
    assert [(e["action"], e["version"], e["previous"]) for e in registry.history()] == [
        ("promote", first.id, None),
        ("promote", second.id, first.id),
        ("rollback", first.id, second.id),
    ]
    with pytest.raises(RegistryError, match=f"no version 'nope'.*{first.id}"):
        registry.promote("nope", reason="typo")
    with pytest.raises(RegistryError, match="no version"):
        registry.promote("../de", reason="outside")


def test_prune_keeps_the_newest_the_promoted_and_the_rollback_target(tmp_path, two_models):
    registry = ModelRegistry(tmp_path / "de")
    ids = [
        registry.add_version(f"{i:024d}", two_models[i % 2], created=1_700_000_000 + i).id
        for i in range(6)
    ]
    registry.promote(ids[0], reason="first")
    registry.promote(ids[1], reason="better")
    assert registry.prune(keep=2) == [ids[2], ids[3]]
    assert [v.id for v in registry.versions()] == [ids[0], ids[1], ids[4], ids[5]]
    assert registry.rollback().id == ids[0]
    with pytest.raises(ValueError, match="keep"):
        registry.prune(keep=0)


def test_readers_see_one_bundle_or_the_other_while_promotions_swap(tmp_path, two_models):
    """A reader loading the promoted model through the links while another thread promotes the
    two versions in turn: every load succeeds and is one of the two tables, whole."""
    registry = ModelRegistry(tmp_path / "de")
    build_old, build_new, old, new = two_models
    ids = [
        registry.add_version("a" * 24, build_old).id,
        registry.add_version("b" * 24, build_new).id,
    ]
    registry.promote(ids[0], reason="first")
    stop = threading.Event()

    def swap():
        turn = 1
        while not stop.is_set():
            registry.promote(ids[turn], reason="swap")
            turn = 1 - turn

    swapper = threading.Thread(target=swap)
    swapper.start()
    seen = set()
    try:
        for _ in range(60):
            table = table_of(tmp_path / "de" / "model")
            if np.array_equal(table, old.numpy()):
                seen.add("old")
            else:
                np.testing.assert_array_equal(table, new.numpy())
                seen.add("new")
    finally:
        stop.set()
        swapper.join()
    assert seen == {"old", "new"}


def test_a_bundle_of_an_earlier_release_is_adopted(tmp_path, model):
    root = tmp_path / "de"
    model.save(root / "model")
    (root / "manifest.json").write_text(json.dumps({"fingerprint": "f" * 24}))

    # making a registry and reading it moves nothing: the adoption is a step of its own
    reader = ModelRegistry(root)
    assert (reader.versions(), reader.promoted()) == ([], None)
    assert reader.legacy_bundle() == root / "model"
    assert sorted(p.name for p in root.iterdir()) == ["manifest.json", "model"]

    registry = ModelRegistry.open(root)

    [version] = registry.versions()
    assert version.fingerprint == "f" * 24
    assert registry.promoted() == version
    assert (root / "model").is_symlink()
    np.testing.assert_array_equal(table_of(root / "model"), model.weight.detach().numpy())
    assert ModelRegistry.open(root).versions() == [version]  # adopted once
    assert registry.adopt_legacy_bundle() is None and registry.legacy_bundle() is None


def damage(bundle) -> None:
    """Cut the weights file short, as a full disk or an interrupted copy leaves it."""
    weights = bundle / "embeddings.safetensors"
    with open(weights, "r+b") as handle:
        handle.truncate(weights.stat().st_size // 2)


def test_a_damaged_version_is_neither_promoted_nor_rolled_back_to(tmp_path, two_models):
    registry = ModelRegistry(tmp_path / "de")
    first = registry.add_version("a" * 24, two_models[0])
    second = registry.add_version("b" * 24, two_models[1])
    registry.promote(first.id, reason="first")
    damage(second.bundle)
    link, history = os.readlink(registry.root / "promoted"), registry.history()

    with pytest.raises(DamagedVersion, match=f"{second.id} cannot be promoted.*truncated"):
        registry.promote(second.id, reason="by hand")
    assert os.readlink(registry.root / "promoted") == link and registry.history() == history

    # a rollback target damaged after its promotion ended is refused the same way
    healthy = registry.add_version("c" * 24, two_models[1])
    registry.promote(healthy.id, reason="gate passed")
    damage(first.bundle)
    history = registry.history()
    with pytest.raises(DamagedVersion, match=f"{first.id} cannot be promoted"):
        registry.rollback()
    assert registry.promoted() == healthy and registry.history() == history


def test_re_promoting_keeps_the_rollback_target_and_two_rollbacks_swap_back(tmp_path, two_models):
    registry = ModelRegistry(tmp_path / "de")
    first = registry.add_version("a" * 24, two_models[0])
    second = registry.add_version("b" * 24, two_models[1])
    registry.promote(first.id, reason="first")
    registry.promote(second.id, reason="better")
    entries = len(registry.history())

    assert registry.promote(second.id, reason="again, by hand") == second
    assert len(registry.history()) == entries  # nothing recorded: nothing changed
    assert registry.previous() == first

    assert registry.rollback() == first
    assert registry.rollback() == second  # the second rollback undoes the first
    assert registry.rollback() == first
    assert registry.previous() == second


# --- psp models ------------------------------------------------------------------------------------


def test_psp_models_list_promote_and_rollback(tmp_path, two_models, capsys, monkeypatch):
    root = tmp_path / "storage"
    registry = ModelRegistry(root / "de" / "psp_model")
    first = registry.add_version("a" * 24, two_models[0], created=1_700_000_000)
    second = registry.add_version("b" * 24, two_models[1], created=1_700_000_100)
    registry.promote(first.id, reason="first")
    monkeypatch.setenv("PSP_STORAGE_ROOT", str(root))

    assert main(["models", "list", "de"]) == 0
    table = capsys.readouterr().out.splitlines()
    assert table[0].split() == ["version", "created", "mode", "parent", "dev:sts17_en_en"]
    assert table[1].split()[:2] == ["*", first.id] and table[2].split()[0] == second.id

    assert main(["models", "promote", "de", second.id]) == 0
    assert capsys.readouterr().out == f"promoted {second.id}: {second.bundle}\n"
    assert main(["models", "list", str(registry.root), "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)["versions"]
    assert [(r["version"], r["promoted"], r["rollback_target"]) for r in rows] == [
        (first.id, False, True),
        (second.id, True, False),
    ]

    assert main(["models", "rollback", "de", "--storage-root", str(root)]) == 0
    assert capsys.readouterr().out.startswith(f"rolled back to {first.id}")
    assert registry.promoted() == first

    assert main(["models", "promote", "de", "20990101T000000Z-none"]) == 2
    assert f"no version '20990101T000000Z-none' (versions: {first.id}, {second.id})" in (
        capsys.readouterr().err
    )
    assert main(["models", "list", "fr"]) == 2
    assert "no model versions there" in capsys.readouterr().err

    assert main(["models", "promote", "de", first.id]) == 0
    assert capsys.readouterr().out == (
        f"{first.id} is already the promoted version: nothing changed (rollback target: "
        f"{second.id})\n"
    )


def test_psp_models_list_shows_how_each_version_was_trained(tmp_path, two_models, capsys):
    registry = ModelRegistry(tmp_path / "de")
    build_old, build_new, _, _ = two_models

    def with_retrain(build, retrain):
        return lambda path: {**build(path), "retrain": retrain}

    full = retrain_record("full", parent=None, new_pairs=900, replay_pairs=0, reason="first")
    legacy = registry.add_version("a" * 24, build_old, created=1_700_000_000)
    first = registry.add_version("b" * 24, with_retrain(build_old, full), created=1_700_000_100)
    continued = retrain_record(
        "incremental", parent=first.id, new_pairs=50, replay_pairs=100, reason="new bitext"
    )
    second = registry.add_version(
        "c" * 24, with_retrain(build_new, continued), created=1_700_000_200
    )
    assert json.loads((second.directory / "version.json").read_text())["retrain"] == continued
    assert registry.version(first.id).retrain == full and legacy.retrain is None

    assert main(["models", "list", str(registry.root)]) == 0
    lines = capsys.readouterr().out.splitlines()
    mode, parent = lines[0].index("mode"), lines[0].index("parent")
    cells = [(line[mode:parent].strip(), line[parent:].split()[0]) for line in lines[1:4]]
    assert cells[1:] == [("full", "-"), ("incremental", first.id)]
    assert cells[0][0] == ""  # written before versions recorded it
    assert main(["models", "list", str(registry.root), "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)["versions"]
    assert [r["retrain"] for r in rows] == [None, full, continued]
    with pytest.raises(ValueError, match="retrain mode"):
        retrain_record("partial", parent=None, new_pairs=1, replay_pairs=0, reason="")


def test_psp_models_promote_of_a_damaged_version_is_one_line_and_changes_nothing(
    tmp_path, two_models
):
    """As a user types it: exit 2, one line on stderr, the link and the history untouched."""
    registry = ModelRegistry(tmp_path / "de")
    first = registry.add_version("a" * 24, two_models[0])
    second = registry.add_version("b" * 24, two_models[1])
    registry.promote(first.id, reason="first")
    damage(second.bundle)
    history = (registry.root / "promotions.jsonl").read_bytes()

    completed = subprocess.run(
        [sys.executable, "-m", "psp_core.cli", "models", "promote", str(registry.root), second.id],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert completed.returncode == 2, completed.stderr
    [line] = completed.stderr.strip().splitlines()
    assert line.startswith(f"psp: error: version {second.id} cannot be promoted")
    assert f"the promoted version stays {first.id}" in line
    assert registry.promoted() == first
    assert (registry.root / "promotions.jsonl").read_bytes() == history


def test_versions_made_in_the_same_second_keep_the_order_they_were_made_in(tmp_path):
    """Ids carry the creation time to the second and then a fingerprint: two versions made
    within one second are still listed oldest first, whatever their fingerprints."""
    registry = ModelRegistry(tmp_path / "psp_model")

    def build(path):
        path.mkdir()
        return {}

    older = registry.add_version("f" * 24, build, created=1_800_000_000.2)
    newer = registry.add_version("0" * 24, build, created=1_800_000_000.7)
    assert newer.id < older.id  # (the ids alone would put the newer first)
    assert [v.id for v in registry.versions()] == [older.id, newer.id]
