"""``psp embed`` and ``embed()`` on lines of any length: a line (a JSON text, a Parquet value)
past the character limit is embedded from its start and counted, and memory stays bounded
however long the line, even with no newline at all."""

from __future__ import annotations

import io
import json
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from psp_core.cli import main
from psp_core.inference.model import load_model

PSP_SCRIPT = Path(sys.executable).with_name("psp")
MEMORY_LIMIT_BYTES = 1 << 30


def embed(*argv) -> int:
    return main(["embed", *map(str, argv)])


def test_text_lines_past_max_chars_are_cut_and_counted(tmp_path, bundle, caplog):
    long_line = "abc defg hij " * 40
    source = tmp_path / "corpus.txt"
    source.write_text(f"short one\n{long_line}\nlast", "utf-8")
    output = tmp_path / "vectors.npy"

    with caplog.at_level("INFO", logger="psp"):
        assert embed("--sentence-file", source, "--model", bundle, "--output-file", output,
                     "--max-chars", 100) == 0  # fmt: skip

    expected = load_model(bundle).embed(["short one", long_line[:100], "last"])
    np.testing.assert_allclose(np.load(output), expected, atol=1e-7)
    summary = [r.getMessage() for r in caplog.records if "wrote 3 x" in r.getMessage()]
    assert summary and "1 record was longer than 100 characters" in summary[0]
    assert f"{source}:2" in summary[0]


def test_jsonl_and_parquet_values_past_max_chars_are_cut(tmp_path, bundle, caplog):
    texts = ["fine", "x y z " * 30, "ok"]
    jsonl = tmp_path / "corpus.jsonl"
    jsonl.write_text("".join(json.dumps({"text": t}) + "\n" for t in texts), "utf-8")
    parquet = tmp_path / "corpus.parquet"
    pq.write_table(pa.table({"text": texts}), parquet)
    expected = load_model(bundle).embed([t[:50] for t in texts])
    for source, where in ((jsonl, f"{jsonl}:2"), (parquet, f"{parquet}: row 1")):
        output = tmp_path / f"{source.suffix[1:]}.npy"
        caplog.clear()
        with caplog.at_level("INFO", logger="psp"):
            assert embed("--sentence-file", source, "--model", bundle, "--output-file", output,
                         "--max-chars", 50) == 0  # fmt: skip
        np.testing.assert_allclose(np.load(output), expected, atol=1e-7)
        assert any(where in r.getMessage() for r in caplog.records)


def test_a_jsonl_line_too_long_for_the_limit_is_one_line_naming_it(tmp_path, bundle, capsys):
    source = tmp_path / "corpus.jsonl"
    output = tmp_path / "vectors.npy"
    # 10 characters: lines of up to 12 x 10 + 65,536 characters are read
    source.write_text('{"text": "a"}\n{"text": "b", "pad": "' + "p" * 70_000 + '"}\n', "utf-8")

    assert embed("--sentence-file", source, "--model", bundle, "--output-file", output,
                 "--max-chars", 10) == 2  # fmt: skip

    error = capsys.readouterr().err.strip().splitlines()
    assert len(error) == 1 and f"{source}:2: a JSON Lines line longer than" in error[0]
    assert not output.exists()


def test_standard_input_is_spooled_then_cut_the_same_way(tmp_path, bundle, caplog, monkeypatch):
    long_line = "abc defg " * 30
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(f"one\n{long_line}".encode())))
    output = tmp_path / "vectors.npy"

    with caplog.at_level("INFO", logger="psp"):
        assert embed("--sentence-file", "-", "--model", bundle, "--output-file", output,
                     "--max-chars", 64) == 0  # fmt: skip

    expected = load_model(bundle).embed(["one", long_line[:64]])
    np.testing.assert_allclose(np.load(output), expected, atol=1e-7)
    assert any("the first at standard input:2" in r.getMessage() for r in caplog.records)


def test_the_library_embeds_a_huge_string_from_its_start(bundle, caplog):
    model = load_model(bundle)
    huge = "abc defg " * 50
    with caplog.at_level("WARNING"):
        vectors = model.embed(["one", huge], max_chars=40)
    np.testing.assert_allclose(vectors, model.embed(["one", huge[:40]]), atol=1e-7)
    assert any("1 of 2 sentences longer than 40" in r.getMessage() for r in caplog.records)
    # None: every character, as before
    whole = model.embed([huge], max_chars=None)
    assert not np.allclose(whole, vectors[1:])


def write_one_line(path: Path, size: int) -> None:
    """``size`` bytes of words and no newline at all."""
    block = ("ab cdéf ghij " * 8192).encode("utf-8")
    with open(path, "wb") as handle:
        for _ in range(size // len(block)):
            handle.write(block)
        handle.write(block[: size % len(block)].rstrip(b"\xc3"))


def peak_rss_of(command: list[str], log: Path) -> tuple[int, int, str]:
    """Run ``command``; its own peak resident bytes, its exit code and its standard error. The
    peak is the child's VmHWM, read while it runs: ``wait4``'s ``ru_maxrss`` would count the
    test runner's own peak too (Linux folds the forking process's high-water mark into the
    child's at exec)."""
    peak = 0
    with open(log, "wb") as stderr:
        process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=stderr)
        status = Path(f"/proc/{process.pid}/status")
        while process.poll() is None:
            try:
                lines = status.read_text().splitlines()
            except (FileNotFoundError, ProcessLookupError):
                break
            high = [line.split()[1] for line in lines if line.startswith("VmHWM:")]
            peak = max(peak, int(high[0]) * 1024 if high else 0)
            time.sleep(0.01)
        code = process.wait()
    return peak, code, log.read_text()


@pytest.mark.slow
def test_a_100_mb_line_without_a_newline_stays_under_1_gb(tmp_path, bundle):
    source = tmp_path / "one-line.txt"
    write_one_line(source, 100_000_000)
    output = tmp_path / "vectors.npy"

    peak, code, stderr = peak_rss_of([str(PSP_SCRIPT), "embed", "--sentence-file", str(source),
                                      "--model", str(bundle), "--output-file", str(output)],
                                     tmp_path / "stderr")  # fmt: skip

    assert code == 0, stderr
    assert peak < MEMORY_LIMIT_BYTES, f"peak resident {peak / 2**20:.0f} MiB"
    assert "1 record was longer than 100,000 characters" in stderr
    assert np.load(output).shape == (1, 16)


def test_psp_score_scores_long_sentences_from_their_start_and_refuses_a_huge_line(
    tmp_path, bundle, capsys
):
    """A pair line is held whole only up to two sentences of --max-chars and a tab: a sentence
    past --max-chars is scored from its start (the output repeats it whole), and a longer line
    is one error naming it, before any score is written."""
    long = "abc defg hij " * 20  # 260 characters
    pairs = tmp_path / "pairs.tsv"
    pairs.write_text(f"short one\tanother one\n{long}\tsecond\n", "utf-8")
    scores = tmp_path / "scores.tsv"
    assert main(["score", "--sentence-pair-file", str(pairs), "--model", str(bundle),
                 "--output-file", str(scores), "--max-chars", "200"]) == 0  # fmt: skip
    lines = scores.read_text("utf-8").splitlines()
    assert lines[1].startswith(f"{long}\tsecond\t")
    model = load_model(bundle)
    want = model.score([("short one", "another one"), (long[:200], "second")])
    assert [float(line.split("\t")[2]) for line in lines] == pytest.approx(want, abs=2e-6)

    huge = tmp_path / "huge.tsv"
    huge.write_text("a\tb\n" + "x" * 5_000_000 + "\tc\n", "utf-8")  # past 2 x 200 + 1
    out = tmp_path / "huge-scores.tsv"
    assert main(["score", "--sentence-pair-file", str(huge), "--model", str(bundle),
                 "--output-file", str(out), "--max-chars", "200"]) == 2  # fmt: skip
    error = capsys.readouterr().err.strip().splitlines()
    assert len(error) == 1 and f"{huge}:2: longer than 401 characters" in error[0], error
    assert not out.exists()
