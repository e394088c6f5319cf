"""Fixtures of the ``psp`` command's tests: the inputs every command reads."""

from __future__ import annotations

import json
from pathlib import Path

import pytest


@pytest.fixture()
def inputs(tmp_path, toy) -> dict[str, Path]:
    folder = tmp_path / "inputs"
    folder.mkdir()
    pairs = toy.pairs(40, seed=3)
    sentences = folder / "sentences.txt"
    sentences.write_text("".join(f"{a}\n{b}\n" for a, b in pairs), encoding="utf-8")
    pair_file = folder / "pairs.tsv"
    pair_file.write_text("".join(f"{a}\t{b}\n" for a, b in pairs), encoding="utf-8")
    eval_dir = tmp_path / "eval"
    (eval_dir / "sts17").mkdir(parents=True)
    (eval_dir / "sts17" / "en-en.tsv").write_text(
        "".join(f"{i % 5}.0\t{a}\t{b}\n" for i, (a, b) in enumerate(pairs)), encoding="utf-8"
    )
    return {"sentences": sentences, "pairs": pair_file, "eval": eval_dir}


@pytest.fixture()
def train_inputs(toy_training_file, spm_path, tmp_path) -> dict[str, Path]:
    sources = tmp_path / "inputs" / "sources.json"
    sources.parent.mkdir(exist_ok=True)
    # an unreachable mirror: a test that got past the checks would fail on the download
    url = "http://127.0.0.1:9/none.zip"
    sources.write_text(json.dumps({"x.zip": {"url": url, "format": "stsb"}}))
    return {"data": toy_training_file, "spm": spm_path, "sources": sources}
