"""``psp embed`` on corpora as people keep them: JSON Lines with a named field, a Parquet column, a
Parquet output with the input's ids beside the vectors; bad records are clear errors that leave
nothing behind."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import psp_core.cli.embed
from psp_core.cli import main
from psp_core.inference.model import load_model

PSP_SCRIPT = Path(sys.executable).with_name("psp")


@pytest.fixture()
def sentences(toy) -> list[str]:
    lines = [s for pair in toy.pairs(20, seed=5) for s in pair]
    lines[2:2] = ["", "ÄÖÜ ß naïve café", 'a "quoted" line\twith a tab']
    return lines


@pytest.fixture()
def small_chunks(monkeypatch):
    """Embed 7 records per call, so that every input spans several batches and row groups."""
    monkeypatch.setattr(psp_core.cli.embed, "EMBED_CHUNK", 7)


def write_jsonl(path: Path, records: list) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records), "utf-8")
    return path


def embed(*argv) -> int:
    return main(["embed", *map(str, argv)])


def read_vectors(path: Path) -> pd.DataFrame:
    return pq.read_table(path).to_pandas()


def test_jsonl_field_to_parquet_with_ids(tmp_path, bundle, sentences, small_chunks):
    records = [{"id": f"doc-{i}", "body": s, "n": i} for i, s in enumerate(sentences)]
    source = write_jsonl(tmp_path / "in" / "corpus.jsonl", records)
    output = tmp_path / "out" / "vectors.parquet"

    assert embed("--sentence-file", source, "--field", "body", "--id-field", "id",
                 "--model", bundle, "--output-file", output) == 0  # fmt: skip

    table = pq.read_table(output)
    assert table.column_names == ["id", "embedding"]
    assert table.schema.field("embedding").type == pa.list_(pa.float32(), 16)
    assert table.column("id").to_pylist() == [f"doc-{i}" for i in range(len(sentences))]
    vectors = np.stack(table.column("embedding").to_numpy(zero_copy_only=False))
    np.testing.assert_allclose(vectors, load_model(bundle).embed(sentences), rtol=1e-6, atol=1e-7)
    assert [p.name for p in output.parent.iterdir()] == ["vectors.parquet"]


def test_jsonl_skips_blank_lines_and_defaults_to_the_text_field(tmp_path, bundle, sentences):
    source = tmp_path / "corpus.ndjson"
    lines = [json.dumps({"text": s}) for s in sentences]
    lines[4:4] = ["", "   "]
    source.write_text("\n".join(lines) + "\n\n", encoding="utf-8")
    output = tmp_path / "vectors.npy"

    assert embed("--sentence-file", source, "--model", bundle, "--output-file", output) == 0

    np.testing.assert_allclose(np.load(output), load_model(bundle).embed(sentences), atol=1e-7)


@pytest.mark.parametrize("text_type", [pa.string(), pa.large_string()])
def test_parquet_column_to_npy_and_to_parquet(tmp_path, bundle, sentences, text_type, small_chunks):
    source = tmp_path / "in" / "corpus.parquet"
    source.parent.mkdir()
    table = pa.table(
        {
            "key": pa.array(np.arange(len(sentences), dtype=np.int32) * 10),
            "sentence": pa.array(sentences, type=text_type),
            "other": pa.array([1.5] * len(sentences)),
        }
    )
    pq.write_table(table, source, row_group_size=5)  # row groups unlike the batches
    expected = load_model(bundle).embed(sentences)

    as_npy = tmp_path / "out" / "vectors.npy"
    assert embed("--sentence-file", source, "--field", "sentence",
                 "--model", bundle, "--output-file", as_npy) == 0  # fmt: skip
    np.testing.assert_allclose(np.load(as_npy), expected, rtol=1e-6, atol=1e-7)

    as_parquet = tmp_path / "out" / "vectors.pq"
    assert embed("--sentence-file", source, "--field", "sentence", "--id-field", "key",
                 "--model", bundle, "--output-file", as_parquet) == 0  # fmt: skip
    frame = read_vectors(as_parquet)
    assert frame["key"].dtype == np.int32
    assert frame["key"].tolist() == list(range(0, 10 * len(sentences), 10))
    np.testing.assert_allclose(np.stack(frame["embedding"]), expected, rtol=1e-6, atol=1e-7)


def test_text_to_parquet_numbers_the_rows(tmp_path, bundle, sentences, small_chunks):
    source = tmp_path / "sentences.txt"
    source.write_text("\n".join(sentences) + "\n", encoding="utf-8")
    output = tmp_path / "vectors.parquet"

    assert embed("--sentence-file", source, "--model", bundle, "--output-file", output,
                 "--dim", 8, "--normalize") == 0  # fmt: skip

    frame = read_vectors(output)
    assert frame.columns.tolist() == ["row", "embedding"]
    assert frame["row"].tolist() == list(range(len(sentences)))
    expected = load_model(bundle).embed(sentences, dim=8, normalize=True)
    np.testing.assert_allclose(np.stack(frame["embedding"]), expected, rtol=1e-6, atol=1e-7)


def test_empty_inputs_give_empty_outputs(tmp_path, bundle):
    source = write_jsonl(tmp_path / "empty.jsonl", [])
    output = tmp_path / "vectors.parquet"
    assert embed("--sentence-file", source, "--model", bundle, "--output-file", output) == 0
    table = pq.read_table(output)
    assert table.num_rows == 0
    assert table.column_names == ["row", "embedding"]


def test_ids_of_changing_types_are_kept_when_they_convert(
    tmp_path, bundle, sentences, small_chunks
):
    records = [{"text": s, "id": i if i < 7 else str(i)} for i, s in enumerate(sentences)]
    source = write_jsonl(tmp_path / "mixed.jsonl", records)
    output = tmp_path / "vectors.parquet"
    argv = ["--sentence-file", source, "--id-field", "id", "--model", bundle]
    assert embed(*argv, "--output-file", output) == 0  # "7", "8"... become 7, 8...
    assert read_vectors(output)["id"].tolist() == list(range(len(sentences)))

    records[9]["id"] = "nine"
    write_jsonl(source, records)
    assert embed(*argv, "--output-file", output) == 2
    assert read_vectors(output)["id"].tolist() == list(range(len(sentences)))  # the old one


@pytest.mark.parametrize(("bad_record", "line"), [(3, 4), (20, 23)])
def test_an_id_of_another_type_names_its_line(
    tmp_path, bundle, sentences, small_chunks, capsys, bad_record, line
):
    """A value that does not convert to the ids' type (set by the first batch, or unknown within
    it) is named by its line, blank lines counted, not by the position of its batch."""
    records = [{"text": s, "id": i} for i, s in enumerate(sentences)]
    records[bad_record]["id"] = "not a number"
    lines = [json.dumps(r) for r in records]
    lines[5:5] = ["", "  "]  # blank lines: a record's line is no longer its position + 1
    source = tmp_path / "corpus.jsonl"
    source.write_text("\n".join(lines) + "\n", encoding="utf-8")
    output = tmp_path / "out" / "vectors.parquet"
    argv = ["--sentence-file", source, "--id-field", "id", "--model", bundle]

    assert embed(*argv, "--output-file", output) == 2

    err = capsys.readouterr().err
    expected = f'psp: error: {source}:{line}: id field "id" is the string "not a number"'
    assert err.startswith(expected), err
    assert "int64" in err and "near vector" not in err
    assert not output.parent.exists() or list(output.parent.iterdir()) == []


@pytest.mark.parametrize(
    ("lines", "arguments", "fragments"),
    [
        (['{"text": "fine"}', '{"text": "broken'], [], ["corpus.jsonl:2: not JSON"]),
        (['{"text": "fine"}', '["a list"]'], [], ["corpus.jsonl:2: a JSON list, expected an object"]),
        (['{"body": "x", "id": 1}'], [], ['corpus.jsonl:1: no "text" field (fields: body, id)', "--field"]),
        (['{"text": 3}'], [], ['corpus.jsonl:1: field "text" is a number, expected a string']),
        (['{"text": null}'], [], ['field "text" is null']),
        (['{"text": "a", "id": 1}', '{"text": "b"}'], ["--id-field", "id"], ['corpus.jsonl:2: no "id" id field']),
        (['{"text": "a"}'], ["--id-field", "text", "--output-file", "{out}.npy"], ["--id-field", ".parquet"]),
    ],
)  # fmt: skip
def test_bad_jsonl_is_a_clear_error_that_leaves_nothing(
    tmp_path, bundle, capsys, lines, arguments, fragments
):
    source = tmp_path / "in" / "corpus.jsonl"
    source.parent.mkdir()
    source.write_text("\n".join(lines) + "\n", encoding="utf-8")
    out_dir = tmp_path / "out"
    arguments = [a.replace("{out}", str(out_dir / "vectors")) for a in arguments]
    if "--output-file" not in arguments:
        arguments += ["--output-file", str(out_dir / "vectors.parquet")]

    assert embed("--sentence-file", source, "--model", bundle, *arguments) == 2

    err = capsys.readouterr().err
    assert err.startswith("psp: error: ")
    for fragment in fragments:
        assert fragment in err, err
    assert not out_dir.exists() or list(out_dir.iterdir()) == []


def _parquet(path: Path, **columns) -> Path:
    pq.write_table(pa.table(columns), path)
    return path


def test_bad_parquet_is_a_clear_error(tmp_path, bundle, capsys):
    out = tmp_path / "out" / "vectors.parquet"
    cases = [
        (_parquet(tmp_path / "a.parquet", body=["x"]), [], ['no "text" column (columns: body)']),
        (_parquet(tmp_path / "b.parquet", text=[1, 2]), [], ['column "text" holds int64']),
        (_parquet(tmp_path / "c.parquet", text=["a", None, "c"]), [], ['row 1 of column "text"']),
        (_parquet(tmp_path / "d.parquet", text=["a"]), ["--id-field", "key"], ['no "key" column']),
    ]
    not_parquet = tmp_path / "e.parquet"
    not_parquet.write_text("plain text\n")
    cases.append((not_parquet, [], ["e.parquet: not a Parquet file"]))
    for source, arguments, fragments in cases:
        argv = ["--sentence-file", source, "--model", bundle, "--output-file", out, *arguments]
        assert embed(*argv) == 2
        err = capsys.readouterr().err
        for fragment in fragments:
            assert fragment in err, err
        assert not out.parent.exists() or list(out.parent.iterdir()) == []


def test_field_options_on_text_input_are_refused(tmp_path, bundle, capsys):
    source = tmp_path / "sentences.txt"
    source.write_text("hello\n")
    argv = ["--sentence-file", source, "--model", bundle, "--output-file", tmp_path / "v.npy"]
    assert embed(*argv, "--field", "body") == 2
    assert "--field names a field of JSON Lines or Parquet input" in capsys.readouterr().err
    assert embed(*argv, "--input-format", "jsonl") == 2  # read as JSON: "hello" is not JSON
    assert "sentences.txt:1: not JSON" in capsys.readouterr().err


@pytest.mark.slow
def test_jsonl_from_standard_input(tmp_path, bundle, sentences):
    output = tmp_path / "out" / "vectors.parquet"
    argv = [str(PSP_SCRIPT), "embed", "--sentence-file", "-", "--input-format", "jsonl"]
    argv += ["--id-field", "id", "--model", str(bundle), "--output-file", str(output)]
    body = "".join(json.dumps({"text": s, "id": i}) + "\n" for i, s in enumerate(sentences))

    completed = subprocess.run(argv, input=body.encode(), capture_output=True, timeout=120)

    assert completed.returncode == 0, completed.stderr
    frame = read_vectors(output)
    assert frame["id"].tolist() == list(range(len(sentences)))
    expected = load_model(bundle).embed(sentences)
    np.testing.assert_allclose(np.stack(frame["embedding"]), expected, rtol=1e-6, atol=1e-7)
    assert [p.name for p in output.parent.iterdir()] == ["vectors.parquet"]


def test_reading_parquet_keeps_no_more_than_a_batch(tmp_path):
    """The Parquet reader's memory stays flat over a file of many row groups (pyarrow's
    pre-buffering kept every column chunk read so far: 90 MB per million sentences)."""
    from psp_core.cli.corpus_files import Corpus

    source = tmp_path / "many.parquet"
    line = "word " * 40
    with pq.ParquetWriter(source, pa.schema([("text", pa.string())])) as writer:
        for start in range(0, 200_000, 10_000):
            writer.write_table(
                pa.table({"text": [f"{line}{i}" for i in range(start, start + 10_000)]})
            )
    peak = 0
    count = 0
    for batch in Corpus(source, "parquet", str(source)).batches(4096):
        count += len(batch.texts)
        peak = max(peak, pa.total_allocated_bytes())
    assert count == 200_000
    assert peak < 12 << 20, peak  # the file holds 41 MB of text
