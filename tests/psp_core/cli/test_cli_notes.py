"""``psp`` shows no raw Python warning: sentences with nothing to embed (a blank line with
``--normalize``, a blank side in ``psp score``, a blank line in ``psp mine``) are one line at
the end, with their count and the first one's file and true line (counted from the start of the
file, not of the chunk it was embedded in)."""

from __future__ import annotations

import dataclasses
import importlib.util

import pytest

from psp_core.cli.embed import EMBED_CHUNK
from tests.psp_core.cli_runs import run_psp


def _notes(stderr: str) -> list[str]:
    assert "Traceback" not in stderr and "Warning:" not in stderr, stderr
    assert "warnings.warn" not in stderr and "  warn(" not in stderr, stderr
    return [line for line in stderr.splitlines() if "nothing to embed" in line]


def test_embed_names_the_true_line_of_a_blank_sentence_past_the_first_chunk(
    tmp_path, bundle
) -> None:
    lines = [f"sentence number {i}" for i in range(EMBED_CHUNK + 5000)]
    blank = [EMBED_CHUNK + 3616, EMBED_CHUNK + 3620]  # (0-based: lines past the first chunk)
    for index in blank:
        lines[index] = ""
    source = tmp_path / "s.txt"
    source.write_text("\n".join(lines) + "\n", encoding="utf-8")
    argv = ["embed", "--sentence-file", str(source), "--model", str(bundle), "--normalize"]
    done = run_psp([*argv, "--output-file", str(tmp_path / "v.npy")])
    assert done.returncode == 0, done.stderr
    (note,) = _notes(done.stderr)
    assert "2 sentences have nothing to embed" in note
    assert f"first: {source}:{blank[0] + 1})" in note and "zero, not unit length" in note


def test_score_names_the_line_of_a_pair_with_a_blank_side(tmp_path, bundle) -> None:
    pairs = ["a cat\ta dog", "\tnothing on the left", "the sun\tthe moon", "right empty\t"]
    source = tmp_path / "pairs.tsv"
    source.write_text("\n".join(pairs) + "\n", encoding="utf-8")
    done = run_psp(["score", "--sentence-pair-file", str(source), "--model", str(bundle)])
    assert done.returncode == 0, done.stderr
    assert len(done.stdout.splitlines()) == 4
    (note,) = _notes(done.stderr)
    assert "2 pairs have nothing to embed" in note and f"first: {source}:2)" in note


@pytest.mark.skipif(importlib.util.find_spec("torch") is None, reason="psp mine needs torch")
def test_mine_names_the_file_and_line_of_a_blank_line(tmp_path, bundle) -> None:
    source, target = tmp_path / "en.txt", tmp_path / "xx.txt"
    source.write_text("a cat\n\nthe sun\n", encoding="utf-8")
    target.write_text("a dog\nthe moon\n\n", encoding="utf-8")
    argv = ["mine", "--model", str(bundle), "--source-file", str(source)]
    done = run_psp([*argv, "--target-file", str(target), "--output-file", str(tmp_path / "m")])
    assert done.returncode == 0, done.stderr
    (note,) = _notes(done.stderr)
    assert "2 lines have nothing to embed" in note and f"first: {source}:2)" in note


@pytest.mark.parametrize(("trained", "noted"), [(None, True), ([8], False), ([4], True)])
def test_a_dim_the_model_was_not_trained_for_is_one_note(tmp_path, model, trained, noted) -> None:
    if trained is not None:
        model.config = dataclasses.replace(
            model.config, training={"config": {"matryoshka_dims": trained}}
        )
    bundle = model.save(tmp_path / "bundle")
    source = tmp_path / "s.txt"
    source.write_text("a sentence\n", encoding="utf-8")
    argv = ["embed", "--sentence-file", str(source), "--model", str(bundle), "--dim", "8"]
    done = run_psp([*argv, "--output-file", str(tmp_path / "v.npy")])
    assert done.returncode == 0, done.stderr
    notes = [line for line in done.stderr.splitlines() if "--dim 8 keeps the first 8" in line]
    assert len(notes) == int(noted), done.stderr
    if noted:
        assert "16 dimensions" in notes[0] and "Traceback" not in done.stderr
