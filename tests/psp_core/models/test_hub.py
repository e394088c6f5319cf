"""Models by Hugging Face Hub id (``hf://ORG/NAME[/FOLDER][@REVISION]``), offline: a cache laid
out as ``huggingface_hub`` writes it (``models--ORG--NAME/{blobs,refs,snapshots}``, each
snapshot's files links to their blobs), read with ``HF_HUB_OFFLINE=1``, and with a Hub that
cannot be reached; in ``load_model``, ``psp embed``/``info``/``export``/``train --init-from``
and ``psp serve --model``. What cannot be loaded is one line naming the id and the reason."""

from __future__ import annotations

import hashlib
import io
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from tests.conftest import random_model
from tests.psp_core.cli_runs import PSP_SCRIPT, one_error_line

pytest.importorskip("huggingface_hub", reason="huggingface_hub is not installed ([hub] extra)")

SENTENCES = ["a cat sleeps", "the old man reads a letter", "ok"]


def add_revision(
    cache: Path, repo: str, files: dict[str, Path], *, refs: tuple[str, ...] = ("main",)
) -> str:
    """Lay ``files`` (name in the repository -> a local file) out in the Hub cache ``cache`` as a
    commit of ``repo``, as huggingface_hub does: content in ``blobs/<sha256>``, the commit's
    tree of relative links under ``snapshots/<commit>``, each ref in ``refs/<ref>`` holding the
    commit. Returns the commit."""
    folder = cache / f"models--{repo.replace('/', '--')}"
    contents = {name: path.read_bytes() for name, path in sorted(files.items())}
    digests = {name: hashlib.sha256(data).hexdigest() for name, data in contents.items()}
    commit = hashlib.sha1(json.dumps(digests).encode()).hexdigest()  # (40 hex digits, as git's)
    for name, data in contents.items():
        blob = folder / "blobs" / digests[name]
        blob.parent.mkdir(parents=True, exist_ok=True)
        blob.write_bytes(data)
        link = folder / "snapshots" / commit / name
        link.parent.mkdir(parents=True, exist_ok=True)
        link.symlink_to(os.path.relpath(blob, link.parent))
    for ref in refs:
        (folder / "refs" / ref).parent.mkdir(parents=True, exist_ok=True)
        (folder / "refs" / ref).write_text(commit)
    return commit


def bundle_files(bundle: Path, prefix: str = "") -> dict[str, Path]:
    return {prefix + path.name: path for path in bundle.iterdir() if path.is_file()}


@pytest.fixture()
def hub(tmp_path, tokenizer):
    """A Hub cache with ``org/de`` (main: one model; tag v1: another), ``org/all`` (a bundle in
    the folder ``models/de``) and ``org/st`` (a sentence-transformers model)."""
    cache = tmp_path / "hub-cache"
    main_model, old_model = random_model(tokenizer, seed=1), random_model(tokenizer, seed=2)
    main_bundle = main_model.save(tmp_path / "main")
    old_bundle = old_model.save(tmp_path / "old")
    old_commit = add_revision(cache, "org/de", bundle_files(old_bundle), refs=("v1",))
    add_revision(cache, "org/de", bundle_files(main_bundle))
    add_revision(cache, "org/all", bundle_files(main_bundle, "models/de/"))
    modules = tmp_path / "modules.json"
    modules.write_text("[]")
    add_revision(cache, "org/st", {"modules.json": modules, "README.md": modules})
    return {"cache": cache, "main": main_model, "old": old_model, "old_commit": old_commit}


def environment(cache: Path, *, offline: bool = True, endpoint: str | None = None) -> dict:
    env = {**os.environ, "HF_HUB_CACHE": str(cache), "PYTHONDONTWRITEBYTECODE": "1"}
    env.pop("HF_HUB_OFFLINE", None)
    env.pop("TRANSFORMERS_OFFLINE", None)  # (huggingface_hub reads either)
    if offline:
        env["HF_HUB_OFFLINE"] = "1"
    if endpoint:
        env["HF_ENDPOINT"] = endpoint
    return env


def run(argv: list[str], env: dict, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run(argv, env=env, capture_output=True, text=True, timeout=timeout)


def python_embed(model_id: str, env: dict, **kwargs) -> np.ndarray:
    code = (
        "import sys, json, numpy as np\nfrom psp_core import load_model\n"
        "model = load_model(sys.argv[1], **json.loads(sys.argv[2]))\n"
        "np.save(sys.stdout.buffer, model.embed(json.loads(sys.argv[3])))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code, model_id, json.dumps(kwargs), json.dumps(SENTENCES)],
        env=env, capture_output=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr.decode()[-3000:]
    return np.load(io.BytesIO(done.stdout))


def test_load_model_by_hub_id_revision_and_folder_offline(hub) -> None:
    env = environment(hub["cache"])
    want, old = hub["main"].embed(SENTENCES), hub["old"].embed(SENTENCES)
    np.testing.assert_allclose(python_embed("hf://org/de", env), want, rtol=1e-6)
    np.testing.assert_allclose(python_embed("hf://org/de", env, revision="v1"), old, rtol=1e-6)
    np.testing.assert_allclose(python_embed("hf://org/de@v1", env), old, rtol=1e-6)
    at_commit = f"hf://org/de@{hub['old_commit']}"
    np.testing.assert_allclose(python_embed(at_commit, env), old, rtol=1e-6)
    np.testing.assert_allclose(python_embed("hf://org/all/models/de", env), want, rtol=1e-6)


def test_every_command_takes_a_hub_id(hub, tmp_path) -> None:
    env = environment(hub["cache"])
    source = tmp_path / "s.txt"
    source.write_text("\n".join(SENTENCES) + "\n")
    out = tmp_path / "v.npy"
    done = run([str(PSP_SCRIPT), "embed", "--model", "hf://org/de@v1", "--sentence-file",
                str(source), "--output-file", str(out)], env)  # fmt: skip
    assert done.returncode == 0, done.stderr
    np.testing.assert_allclose(np.load(out), hub["old"].embed(SENTENCES), rtol=1e-6)
    info = run([str(PSP_SCRIPT), "info", "hf://org/all/models/de"], env)
    assert info.returncode == 0, info.stderr
    described = json.loads(info.stdout)
    assert described["hub_id"] == "hf://org/all/models/de"
    assert described["path"].startswith(str(hub["cache"].resolve()))
    assert described["checksums_verified"] is True
    pairs = tmp_path / "pairs.tsv"
    pairs.write_text("a cat sleeps\ta cat is sleeping\n")
    score = run([str(PSP_SCRIPT), "score", "--model", "hf://org/de", "--sentence-pair-file",
                 str(pairs)], env)  # fmt: skip
    assert score.returncode == 0 and float(score.stdout.split("\t")[-1]) == pytest.approx(
        hub["main"].score([("a cat sleeps", "a cat is sleeping")])[0], abs=1e-5
    ), score.stderr


@pytest.mark.parametrize(
    ("model_id", "fragments"),
    [
        ("hf://org/missing", ("hf://org/missing: not in the Hugging Face cache", "HF_HUB_OFFLINE")),
        ("hf://org/de@v9", ("hf://org/de@v9: not in the Hugging Face cache",)),
        ("hf://org/st", ("is a sentence-transformers model, not a psp bundle",)),
        ("hf://org/all/models/fr", ("has no folder 'fr'",)),
        ("hf://org", ("'hf://org' is not a Hub model id",)),
    ],
)
def test_what_cannot_be_loaded_is_one_line(hub, tmp_path, model_id, fragments) -> None:
    done = run([str(PSP_SCRIPT), "info", model_id], environment(hub["cache"]))
    assert done.returncode == 2
    one_error_line(done.stderr, *fragments)


def test_a_cached_model_loads_when_the_hub_cannot_be_reached(hub) -> None:
    """Not offline, but the Hub is a closed port: the cache serves what it has, and what it
    lacks is one line saying the Hub could not be reached."""
    env = environment(hub["cache"], offline=False, endpoint="http://127.0.0.1:9")
    np.testing.assert_allclose(
        python_embed("hf://org/de", env), hub["main"].embed(SENTENCES), rtol=1e-6
    )
    done = run([str(PSP_SCRIPT), "info", "hf://org/missing"], env)
    assert done.returncode == 2
    one_error_line(done.stderr, "hf://org/missing: not in the Hugging Face cache and the Hub")


def test_export_train_and_serve_take_a_hub_id(hub, tmp_path, toy_training_file, spm_path) -> None:
    pytest.importorskip("model2vec", reason="model2vec is not installed ([export] extra)")
    pytest.importorskip("torch", reason="psp train needs torch ([train] extra)")
    from tests.psp_core.serving.test_serve import Server

    env = environment(hub["cache"])
    exported = tmp_path / "m2v"
    done = run([str(PSP_SCRIPT), "export", "--model", "hf://org/de", "--format", "model2vec",
                "--output", str(exported)], env)  # fmt: skip
    assert done.returncode == 0, done.stderr
    record = json.loads((exported / "psp_export.json").read_text())
    assert record["source_bundle"] == "hf://org/de"  # the id, no folder of this machine
    assert str(tmp_path) not in (exported / "psp_export.json").read_text()
    trained = tmp_path / "trained"
    done = run([str(PSP_SCRIPT), "train", "--data", str(toy_training_file), "--spm",
                str(spm_path), "--output", str(trained), "--epochs", "1", "--dim", "16",
                "--device", "cpu", "--init-from", "hf://org/de@v1"], env)  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    assert (trained / "config.json").is_file()
    server = Server("--model", "de=hf://org/de", env=env)
    try:
        answer = server.client().embeddings.create(model="de", input=SENTENCES[:1])
        want = hub["main"].embed(SENTENCES[:1], normalize=True)[0]
        np.testing.assert_allclose(answer.data[0].embedding, want, rtol=1e-5, atol=1e-6)
    finally:
        server.stop()


def test_a_bare_hub_name_is_a_folder_and_the_error_says_how_to_ask_the_hub(tmp_path) -> None:
    """``org/name`` stays a local path (a folder may be named so); where there is none, the
    one line says how to name the Hub model."""
    done = subprocess.run(
        [str(PSP_SCRIPT), "info", "org/psp-de"], cwd=tmp_path, capture_output=True, text=True,
        timeout=120,
    )  # fmt: skip
    assert done.returncode == 2
    one_error_line(done.stderr, "org/psp-de is not a directory", "named hf://org/psp-de")
