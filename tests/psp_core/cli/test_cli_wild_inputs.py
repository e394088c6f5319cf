"""Inputs from the wild, as docs/cli.md promises: a JSON Lines record nested beyond what Python
reads, an integer id beyond 64 bits and a lone surrogate escape are each one line naming the
file and the line, exit 2, no output; a Parquet text column that is dictionary-encoded (what
pandas' ``category`` writes) is read as its strings; an output named with a suffix psp does not
write is refused, unless ``--output-format`` says what to write under it."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from psp_core import load_model
from psp_core.cli import main
from tests.psp_core.cli_runs import run_main


def _embed(bundle: Path, source: Path, output: Path, *more: str) -> list[str]:
    argv = ["embed", "--sentence-file", str(source), "--model", str(bundle)]
    return [*argv, "--output-file", str(output), *more]


def _jsonl(tmp_path: Path, bad: str) -> Path:
    path = tmp_path / "docs.jsonl"
    good = [json.dumps({"text": f"sentence {i}", "doc_id": i}) for i in range(3)]
    path.write_text("\n".join([*good, bad, *good]) + "\n", encoding="utf-8")
    return path


@pytest.mark.parametrize(
    ("bad", "fragments"),
    [
        ("[" * 50_000 + "]" * 50_000, ["docs.jsonl:4: JSON nested deeper than"]),
        (
            '{"text": "x", "doc_id": ' + "9" * 30 + "}",
            ["docs.jsonl:4:", "beyond 64 bits", "string"],
        ),
        ('{"text": "a \\ud800 b", "doc_id": 9}', ["docs.jsonl:4:", "lone surrogate", "\\ud800"]),
    ],
    ids=["nested-50000-deep", "id-beyond-64-bits", "lone-surrogate"],
)
def test_a_wild_json_line_is_one_line_naming_the_file_and_line(
    tmp_path, bundle, capsys, bad, fragments
) -> None:
    output = tmp_path / "out.parquet"
    argv = _embed(bundle, _jsonl(tmp_path, bad), output, "--id-field", "doc_id")
    line = run_main(capsys, argv, *fragments)
    assert "docs.jsonl" in line
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bundle", "docs.jsonl"]


def test_a_surrogate_pair_escape_is_text(tmp_path, bundle, capsys) -> None:
    good = _jsonl(tmp_path, '{"text": "thumbs \\ud83d\\udc4d up", "doc_id": 9}')
    assert main(_embed(bundle, good, tmp_path / "v.npy")) == 0
    assert np.load(tmp_path / "v.npy").shape[0] == 7


def test_a_dictionary_encoded_text_column_is_read_as_its_strings(tmp_path, bundle) -> None:
    texts = ["the old man", "a cat sleeps", "the old man", "ok"] * 5
    frame = pd.DataFrame({"text": pd.Series(texts, dtype="category"), "row_id": range(20)})
    source = tmp_path / "corpus.parquet"
    frame.to_parquet(source)
    assert pa.types.is_dictionary(pq.read_schema(source).field("text").type)
    assert main(_embed(bundle, source, tmp_path / "v.npy")) == 0
    want = load_model(bundle).embed(texts)
    np.testing.assert_allclose(np.load(tmp_path / "v.npy"), want, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("name", ["out.csv", "vectors.txt", "v.json"])
def test_an_output_suffix_psp_does_not_write_is_refused(tmp_path, bundle, capsys, name) -> None:
    source = tmp_path / "s.txt"
    source.write_text("a sentence\nanother one\n", encoding="utf-8")
    run_main(capsys, _embed(bundle, source, tmp_path / name), name, "--output-format")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bundle", "s.txt"]
    # asked for, the format is written under that name
    assert main(_embed(bundle, source, tmp_path / name, "--output-format", "npy")) == 0
    assert np.load(tmp_path / name).shape[0] == 2
    parquet = tmp_path / f"p-{name}"
    assert main(_embed(bundle, source, parquet, "--output-format", "parquet")) == 0
    assert pq.read_table(parquet).num_rows == 2


@pytest.mark.parametrize("command", ["embed", "score"])
def test_a_failed_run_takes_back_the_folders_it_made(tmp_path, bundle, capsys, command) -> None:
    """The folders made for the output go when the run fails; one that was there stays."""
    (tmp_path / "keep").mkdir()
    if command == "embed":
        source = _jsonl(tmp_path, "not json")
    else:
        source = tmp_path / "pairs.tsv"
        source.write_text("a\tb\nc\td\nno tab here\n", encoding="utf-8")
    for output in (tmp_path / "new" / "a" / "b" / "out.npy", tmp_path / "keep" / "x" / "out.npy"):
        if command == "embed":
            argv = _embed(bundle, source, output)
        else:
            argv = ["score", "--sentence-pair-file", str(source), "--model", str(bundle)]
            argv += ["--output-file", str(output)]
        run_main(capsys, argv, f"{source}:")
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(["bundle", "keep", source.name])
    assert list((tmp_path / "keep").iterdir()) == []
