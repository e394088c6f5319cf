"""Model bundles: round trip, atomic replacement, and refusal of every kind of tampering."""

from __future__ import annotations

import hashlib
import json
import os
import pickle
import stat
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
import sentencepiece as spm
import torch
import xxhash
from safetensors.numpy import load_file, save_file

from psp_core.inference.model import PSPModel, load_model
from psp_core.models.bundle import (
    CONFIG_FILE,
    EMBEDDINGS_FILE,
    EMBEDDINGS_KEY,
    SPM_FILE,
    BundleConfig,
    BundleError,
    load_bundle,
    read_config,
    save_bundle,
)
from psp_core.tokenization.tokenizer import Tokenizer
from tests.conftest import random_model, toy_sentencepiece
from tests.psp_core.filesystems import fill_up, listing, tiny_tmpfs

BUNDLE_FILES = {CONFIG_FILE, SPM_FILE, EMBEDDINGS_FILE, "README.md"}  # README.md: the model card


@pytest.fixture(scope="module")
def other_spm_proto(toy) -> bytes:
    """A second valid sentencepiece model, trained on other sentences with another vocabulary."""
    return toy_sentencepiece(toy, 300, 120, seed=7, character_coverage=1.0)


def _edit_config(bundle: Path, edit: Callable[[dict], None]) -> None:
    path = bundle / CONFIG_FILE
    data = json.loads(path.read_text())
    edit(data)
    path.write_text(json.dumps(data))


def _embeddings(bundle: Path) -> np.ndarray:
    return load_file(str(bundle / EMBEDDINGS_FILE))[EMBEDDINGS_KEY]


def _record_checksum(bundle: Path, name: str) -> None:
    """Record ``name``'s current size and checksum in config.json, as a writer that saved this
    content would have: the tampering is then only visible to the deeper checks."""
    data = (bundle / name).read_bytes()
    entry = {"bytes": len(data), "xxh3_128": xxhash.xxh3_128(data).hexdigest()}
    _edit_config(bundle, lambda c: c["files"].update({name: entry}))


# --- round trip ---------------------------------------------------------------------------------


def test_round_trip_keeps_embeddings_config_and_tokenizer(tmp_path, spm_proto, toy):
    tokenizer = Tokenizer(spm_proto, lowercase=False, max_length=7)
    table = np.random.default_rng(3).normal(size=(tokenizer.vocab_size, 12)).astype(np.float32)
    config = BundleConfig(
        dim=12,
        vocab_size=tokenizer.vocab_size,
        spm_sha256=tokenizer.sha256,
        lowercase=False,
        max_length=7,
        languages=["en", "xx"],
        training={"epochs": 3, "history": [{"epoch": 0, "loss": 0.5}]},
    )
    original = PSPModel(tokenizer, table, config)

    loaded = load_model(original.save(tmp_path / "bundle"))

    assert {p.name for p in (tmp_path / "bundle").iterdir()} == BUNDLE_FILES
    np.testing.assert_array_equal(loaded.weight.numpy(), table)
    assert loaded.config == config
    assert (loaded.tokenizer.lowercase, loaded.tokenizer.max_length) == (False, 7)
    assert loaded.tokenizer.pretokenizer_name == "none"
    assert loaded.tokenizer.sha256 == tokenizer.sha256
    sentences = [s for pair in toy.pairs(50, seed=5) for s in pair] + ["", "UPPER case", "zzz"]
    sentences.append(" ".join(toy.source_words[:40]))  # longer than max_length pieces
    before, after = tokenizer.encode(sentences), loaded.tokenizer.encode(sentences)
    np.testing.assert_array_equal(after.ids, before.ids)
    np.testing.assert_array_equal(after.offsets, before.offsets)
    assert after.lengths.max() == 7
    # (the loaded model averages over its words' sums: the same vectors to float32 rounding)
    np.testing.assert_allclose(
        loaded.embed(sentences), original.embed(sentences), rtol=1e-5, atol=1e-6
    )


def test_load_bundle_returns_the_saved_pieces(bundle, model, spm_proto):
    config, proto, embeddings = load_bundle(bundle)
    assert proto == spm_proto
    assert embeddings.dtype == np.float32
    np.testing.assert_array_equal(embeddings, model.weight.numpy())
    assert (config.dim, config.vocab_size, config.spm_sha256) == (
        16,
        model.tokenizer.vocab_size,
        model.tokenizer.sha256,
    )
    assert read_config(bundle) == config


def test_bundle_files_are_json_safetensors_and_spm_never_pickle(bundle, monkeypatch):
    assert {p.name for p in bundle.iterdir()} == BUNDLE_FILES
    for path in bundle.iterdir():
        head = path.read_bytes()[:2]
        assert head[:1] != b"\x80", f"{path.name} starts with a pickle protocol marker"
        assert head != b"PK", f"{path.name} is a zip archive (torch.save format)"
    assert isinstance(json.loads((bundle / CONFIG_FILE).read_text()), dict)
    assert set(load_file(str(bundle / EMBEDDINGS_FILE))) == {EMBEDDINGS_KEY}
    assert spm.SentencePieceProcessor(model_proto=(bundle / SPM_FILE).read_bytes()).GetPieceSize()

    def refuse(*args, **kwargs):
        raise AssertionError("loading a bundle must not unpickle anything")

    monkeypatch.setattr(pickle, "load", refuse)
    monkeypatch.setattr(pickle, "loads", refuse)
    monkeypatch.setattr(pickle, "Unpickler", refuse)
    monkeypatch.setattr(torch, "load", refuse)
    assert load_model(bundle).dim == 16


def test_saving_over_a_bundle_replaces_it_and_leaves_no_temporaries(tmp_path, tokenizer):
    target = tmp_path / "bundle"
    random_model(tokenizer, seed=1).save(target)
    (target / "stale.txt").write_text("from the previous bundle")
    replacement = random_model(tokenizer, dim=8, seed=2)

    assert replacement.save(target) == target

    assert [p.name for p in tmp_path.iterdir()] == ["bundle"]
    assert {p.name for p in target.iterdir()} == BUNDLE_FILES
    loaded = load_model(target)
    assert loaded.dim == 8
    np.testing.assert_array_equal(loaded.weight.numpy(), replacement.weight.numpy())


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ("shape", "shape"),
        ("sha", "sha256"),
    ],
)
def test_save_refuses_inconsistent_input_and_writes_nothing(
    tmp_path, tokenizer, spm_proto, change, message
):
    dim = 16
    table = np.zeros((tokenizer.vocab_size, dim), np.float32)
    config = BundleConfig(dim=dim, vocab_size=tokenizer.vocab_size, spm_sha256=tokenizer.sha256)
    if change == "shape":
        table = table[:, :-1]
    else:
        config.spm_sha256 = "0" * 64
    with pytest.raises(BundleError, match=message):
        save_bundle(tmp_path / "bundle", table, spm_proto, config)
    assert list(tmp_path.iterdir()) == []


# --- tampered bundles -----------------------------------------------------------------------------


def _replace_spm(bundle: Path, other: bytes) -> None:
    (bundle / SPM_FILE).write_bytes(other)


def _replace_spm_and_sha(bundle: Path, other: bytes) -> None:
    (bundle / SPM_FILE).write_bytes(other)
    _edit_config(bundle, lambda c: c.update(spm_sha256=hashlib.sha256(other).hexdigest()))
    _record_checksum(bundle, SPM_FILE)


def _garbage_spm_with_matching_sha(bundle: Path, other: bytes) -> None:
    _replace_spm_and_sha(bundle, b"this is not a sentencepiece model")


def _truncate_embeddings(bundle: Path, other: bytes) -> None:
    path = bundle / EMBEDDINGS_FILE
    path.write_bytes(path.read_bytes()[:-100])


def _empty_embeddings(bundle: Path, other: bytes) -> None:
    (bundle / EMBEDDINGS_FILE).write_bytes(b"")


def _save_table(
    transform: Callable[[np.ndarray], np.ndarray], key: str = EMBEDDINGS_KEY, record: bool = True
):
    def tamper(bundle: Path, other: bytes) -> None:
        table = transform(_embeddings(bundle))
        save_file({key: np.ascontiguousarray(table)}, str(bundle / EMBEDDINGS_FILE))
        if record:
            _record_checksum(bundle, EMBEDDINGS_FILE)

    return tamper


def _config_without(key: str):
    return lambda bundle, other: _edit_config(bundle, lambda c: c.pop(key))


def _config_text(text: bytes):
    return lambda bundle, other: (bundle / CONFIG_FILE).write_bytes(text)


def _config_value(key: str, value):
    return lambda bundle, other: _edit_config(bundle, lambda c: c.update({key: value}))


def _config_vocab_plus_one(bundle: Path, other: bytes) -> None:
    _edit_config(bundle, lambda c: c.update(vocab_size=c["vocab_size"] + 1))


def _remove(name: str):
    return lambda bundle, other: (bundle / name).unlink()


TAMPERING = {
    "spm replaced by another model": (_replace_spm, SPM_FILE, "does not match config.json"),
    "spm and sha replaced, vocab differs": (_replace_spm_and_sha, SPM_FILE, "vocab_size"),
    "spm not a sentencepiece model": (
        _garbage_spm_with_matching_sha,
        SPM_FILE,
        "not a sentencepiece model",
    ),
    "embeddings replaced, checksum not recorded": (
        _save_table(lambda t: t + 1.0, record=False),
        EMBEDDINGS_FILE,
        "does not match config.json",
    ),
    "embeddings truncated": (_truncate_embeddings, EMBEDDINGS_FILE, "truncated"),
    "embeddings empty": (_empty_embeddings, EMBEDDINGS_FILE, "truncated"),
    "embeddings one column short": (_save_table(lambda t: t[:, :-1]), EMBEDDINGS_FILE, "shape"),
    "embeddings one row short": (_save_table(lambda t: t[:-1]), EMBEDDINGS_FILE, "shape"),
    "embeddings flattened": (_save_table(lambda t: t.reshape(-1)), EMBEDDINGS_FILE, "shape"),
    "embeddings float64": (
        _save_table(lambda t: t.astype(np.float64)),
        EMBEDDINGS_FILE,
        "float64, expected float32",
    ),
    "embeddings float16": (
        _save_table(lambda t: t.astype(np.float16)),
        EMBEDDINGS_FILE,
        "float16, expected float32",
    ),
    "embeddings under another name": (
        _save_table(lambda t: t, key="weight"),
        EMBEDDINGS_FILE,
        "no tensor named 'embeddings'",
    ),
    "config without dim": (_config_without("dim"), CONFIG_FILE, "missing keys ['dim']"),
    "config without vocab_size": (
        _config_without("vocab_size"),
        CONFIG_FILE,
        "missing keys ['vocab_size']",
    ),
    "config without spm_sha256": (
        _config_without("spm_sha256"),
        CONFIG_FILE,
        "missing keys ['spm_sha256']",
    ),
    "config without format_version": (
        _config_without("format_version"),
        CONFIG_FILE,
        "missing keys ['format_version']",
    ),
    "config invalid JSON": (_config_text(b'{"dim": 16,'), CONFIG_FILE, "not valid JSON"),
    "config invalid UTF-8": (_config_text(b'{"dim": "\xff"}'), CONFIG_FILE, "not valid JSON"),
    "config is a list": (_config_text(b"[1, 2]"), CONFIG_FILE, "expected a JSON object"),
    "config format_version 2": (
        _config_value("format_version", 2),
        CONFIG_FILE,
        "format_version 2",
    ),
    "config vocab_size off by one": (_config_vocab_plus_one, SPM_FILE, "vocab_size"),
    "config dim changed": (_config_value("dim", 17), EMBEDDINGS_FILE, "shape"),
    "config.json missing": (_remove(CONFIG_FILE), CONFIG_FILE, "is missing"),
    "sentencepiece.model missing": (_remove(SPM_FILE), SPM_FILE, "is missing"),
    "embeddings.safetensors missing": (_remove(EMBEDDINGS_FILE), EMBEDDINGS_FILE, "is missing"),
}


@pytest.mark.parametrize(("tamper", "culprit", "problem"), TAMPERING.values(), ids=TAMPERING)
def test_tampered_bundle_is_refused_naming_file_and_problem(
    bundle, other_spm_proto, tamper, culprit, problem
):
    tamper(bundle, other_spm_proto)
    with pytest.raises(BundleError) as caught:
        load_bundle(bundle)
    message = str(caught.value)
    assert str(bundle / culprit) in message
    assert problem in message
    with pytest.raises(BundleError):
        load_model(bundle)


@pytest.mark.parametrize("kind", ["absent", "a file"])
def test_bundle_path_that_is_not_a_directory(tmp_path, kind):
    path = tmp_path / "model"
    if kind == "a file":
        path.write_text("not a bundle")
    with pytest.raises(BundleError, match=f"{path} is not a directory"):
        load_bundle(path)


def test_extra_config_keys_from_newer_writers_are_ignored(bundle, model):
    _edit_config(bundle, lambda c: c.update(comment="added by hand"))
    config, _, embeddings = load_bundle(bundle)
    assert config == model.config
    np.testing.assert_array_equal(embeddings, model.weight.numpy())


@pytest.mark.parametrize(
    ("key", "value"),
    [("dim", 16.0), ("max_length", "100"), ("lowercase", "false"), ("pretokenizer", "spacy")],
)
def test_config_values_of_the_wrong_type_are_refused_on_load(bundle, key, value):
    _edit_config(bundle, lambda c: c.update({key: value}))
    with pytest.raises(BundleError) as caught:
        load_model(bundle)
    assert str(bundle / CONFIG_FILE) in str(caught.value)
    assert key in str(caught.value)


# --- damage: checksums and non-finite weights -----------------------------------------------------


def _flip_two_bytes(bundle: Path, name: str) -> None:
    """Flip the low bit of two bytes in the middle of a file (the values stay finite floats)."""
    path = bundle / name
    data = bytearray(path.read_bytes())
    middle = len(data) // 2
    data[middle] ^= 0x01
    data[middle + 5] ^= 0x01
    path.write_bytes(bytes(data))


@pytest.mark.parametrize("name", [EMBEDDINGS_FILE, SPM_FILE])
def test_two_flipped_bytes_are_refused_naming_the_file(bundle, name):
    _flip_two_bytes(bundle, name)
    with pytest.raises(BundleError) as caught:
        load_model(bundle)
    message = str(caught.value)
    assert str(bundle / name) in message
    assert "does not match config.json" in message
    assert "\n" not in message


def test_config_records_size_and_checksum_of_every_other_file(bundle):
    files = json.loads((bundle / CONFIG_FILE).read_text())["files"]
    assert set(files) == {SPM_FILE, EMBEDDINGS_FILE}
    for name, record in files.items():
        assert record["bytes"] == (bundle / name).stat().st_size
        assert len(record["xxh3_128"]) == 32
    assert load_bundle(bundle)[0].files == files


def _write_table(bundle: Path, table: np.ndarray, *, record: bool) -> None:
    _save_table(lambda _: table, record=record)(bundle, b"")


@pytest.mark.parametrize("value", [np.nan, np.inf, -np.inf])
@pytest.mark.parametrize("checksums", ["recorded", "absent (old bundle)"])
def test_non_finite_weights_are_refused_on_load(bundle, model, value, checksums):
    table = model.weight.numpy().copy()
    table[7, 3] = value
    table[9, 0] = value
    _write_table(bundle, table, record=checksums == "recorded")
    if checksums != "recorded":
        _edit_config(bundle, lambda c: c.pop("files", None))
    with pytest.raises(BundleError) as caught:
        load_model(bundle)
    message = str(caught.value)
    assert str(bundle / EMBEDDINGS_FILE) in message
    assert "2 non-finite values" in message and "row 7" in message


@pytest.mark.parametrize("value", [np.nan, np.inf])
def test_save_refuses_non_finite_weights_and_writes_nothing(tmp_path, model, spm_proto, value):
    table = model.weight.numpy().copy()
    table[3, 3] = value
    with pytest.raises(BundleError, match="1 non-finite value"):
        save_bundle(tmp_path / "bundle", table, spm_proto, model.config)
    assert list(tmp_path.iterdir()) == []


def test_bundle_saved_before_checksums_still_loads(bundle, model):
    _edit_config(bundle, lambda c: c.pop("files"))
    config, _, embeddings = load_bundle(bundle)
    assert config == model.config and config.files == {}
    np.testing.assert_array_equal(embeddings, model.weight.numpy())


def test_bundle_saved_before_checksums_is_still_checked_for_shape(bundle, model):
    _edit_config(bundle, lambda c: c.pop("files"))
    _write_table(bundle, model.weight.numpy()[:, :-1], record=False)
    with pytest.raises(BundleError, match="shape"):
        load_bundle(bundle)


@pytest.mark.parametrize(
    ("files", "problem"),
    [
        ({SPM_FILE: None}, f"no entry for {EMBEDDINGS_FILE}"),
        ("abc", "files must be"),
        ({EMBEDDINGS_FILE: {"bytes": 10}}, "files must be"),
        ({EMBEDDINGS_FILE: {"bytes": "10", "xxh3_128": "0" * 32}}, "files must be"),
        ({"../x": {"bytes": 10, "xxh3_128": "0" * 32}}, "files must be"),
    ],
)
def test_malformed_checksum_records_are_refused(bundle, files, problem):
    def edit(config: dict) -> None:
        if isinstance(files, dict) and SPM_FILE in files:
            config["files"].pop(EMBEDDINGS_FILE)
        else:
            config["files"] = files

    _edit_config(bundle, edit)
    with pytest.raises(BundleError) as caught:
        load_bundle(bundle)
    assert str(bundle / CONFIG_FILE) in str(caught.value)
    assert problem in str(caught.value)


# --- permissions and max_length -------------------------------------------------------------------


@pytest.mark.parametrize(("umask", "mode"), [(0o022, 0o644), (0o027, 0o640), (0o002, 0o664)])
def test_every_bundle_file_honours_the_umask(tmp_path, model, umask, mode):
    previous = os.umask(umask)
    try:
        bundle = model.save(tmp_path / "bundle")
    finally:
        os.umask(previous)
    modes = {p.name: stat.S_IMODE(p.stat().st_mode) for p in bundle.iterdir()}
    assert modes == dict.fromkeys(BUNDLE_FILES, mode)
    assert stat.S_IMODE(bundle.stat().st_mode) == mode | 0o111 & ~umask


@pytest.mark.parametrize("value", [-5, -1])
def test_negative_max_length_is_refused(bundle, tmp_path, model, spm_proto, value):
    _edit_config(bundle, lambda c: c.update(max_length=value))
    with pytest.raises(BundleError) as caught:
        load_model(bundle)
    assert str(bundle / CONFIG_FILE) in str(caught.value)
    assert "max_length must be 0 (no limit) or a positive integer" in str(caught.value)
    model.config.max_length = value
    with pytest.raises(BundleError, match="max_length"):
        save_bundle(tmp_path / "other", model.weight.numpy(), spm_proto, model.config)
    assert not (tmp_path / "other").exists()


def test_max_length_zero_means_no_limit(bundle, toy):
    _edit_config(bundle, lambda c: c.update(max_length=0))
    loaded = load_model(bundle)
    long_sentence = " ".join(toy.source_words[:120])
    assert loaded.tokenizer.encode([long_sentence]).lengths[0] > 100


# --- disk full ------------------------------------------------------------------------------------


@pytest.mark.parametrize("room", ["none", "for the sentencepiece model only"])
def test_save_on_a_full_disk_fails_and_leaves_nothing_behind(tmp_path, tokenizer, room):
    model = random_model(tokenizer, dim=256)  # a 400 KB table, on a 64 KB filesystem
    with tiny_tmpfs(tmp_path / "disk", size_kib=64) as disk:
        if room == "none":
            fill_up(disk)
        before = listing(disk)
        with pytest.raises((OSError, BundleError)) as caught:
            model.save(disk / "bundle")
        assert "No space left on device" in str(caught.value)
        assert listing(disk) == before


def test_the_table_is_read_beside_other_tensors_and_odd_files_go_to_safetensors(bundle, model):
    """load_bundle reads the table with plain file reads (the GIL released: a server loading a
    new version keeps answering); a file of another layout goes to safetensors, which reads it
    or says what is wrong."""
    table = model.weight.numpy()
    _edit_config(bundle, lambda c: c.pop("files"))
    path = bundle / EMBEDDINGS_FILE
    save_file({"a_first": np.arange(6, dtype=np.int64), EMBEDDINGS_KEY: table}, str(path))
    np.testing.assert_array_equal(load_bundle(bundle)[2], table)

    save_file({EMBEDDINGS_KEY: table.astype(np.float16)}, str(path))  # not F32: safetensors
    with pytest.raises(BundleError, match="float16, expected float32"):
        load_bundle(bundle)

    save_file({EMBEDDINGS_KEY: table}, str(path))
    path.write_bytes(path.read_bytes()[:-4])  # short data: safetensors names it
    with pytest.raises(BundleError, match="unreadable or truncated"):
        load_bundle(bundle)
