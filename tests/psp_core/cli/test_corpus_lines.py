"""Text corpora read a block at a time: the same lines, numbers and errors as reading them one by
one, whatever the block size and wherever the blocks cut."""

from __future__ import annotations

import io
import random

import pytest

from psp_core.cli.corpus_files import Corpus, CorpusError, count_lines, read_line_blocks, read_lines


def lines_one_by_one(data: bytes) -> list[str]:
    """The reference (the reader before blocks): a binary file's lines, each decoded alone."""
    return [raw.decode("utf-8").rstrip("\r\n") for raw in io.BytesIO(data)]


def random_text(rng: random.Random, lines: int) -> bytes:
    words = ["a", "bc", "Ärger", "naïve", "中文", "\t", " ", "x\ry", "\x0b", "\u2028", "\x1c"]
    out = []
    for _ in range(lines):
        line = "".join(rng.choice(words) for _ in range(rng.randrange(0, 6)))
        out.append(line + rng.choice(["\n", "\n", "\r\n", "\r\r\n"]))
    data = "".join(out).encode("utf-8")
    return data[:-1] if rng.random() < 0.5 else data  # with or without a last newline


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("block_bytes", [1, 3, 7, 64, 1 << 20])
def test_blocks_give_the_lines_of_reading_one_by_one(tmp_path, seed, block_bytes):
    rng = random.Random(seed)
    data = random_text(rng, rng.randrange(0, 200))
    path = tmp_path / "corpus.txt"
    path.write_bytes(data)
    expected = lines_one_by_one(data)
    numbered = [
        (number + i, line)
        for number, lines in read_line_blocks(path, block_bytes=block_bytes)
        for i, line in enumerate(lines)
    ]
    assert numbered == list(enumerate(expected, 1))
    assert [line for _, line in read_lines(path)] == expected
    assert count_lines(path) == len(expected)


@pytest.mark.parametrize("block_bytes", [1, 5, 1 << 20])
def test_invalid_utf8_names_its_line(tmp_path, block_bytes):
    path = tmp_path / "corpus.txt"
    path.write_bytes(b"ok\nfine\r\nbad \xff here\nafter\n")
    with pytest.raises(CorpusError, match=r"corpus\.txt:3: not valid UTF-8"):
        for _ in read_line_blocks(path, block_bytes=block_bytes):
            pass


def test_text_batches_cut_at_the_size_asked_across_blocks(tmp_path, monkeypatch):
    monkeypatch.setattr("psp_core.cli.corpus_files.LINE_BLOCK_BYTES", 10)
    texts = [f"line {i}" for i in range(23)]
    path = tmp_path / "corpus.txt"
    path.write_text("\n".join(texts), "utf-8")
    corpus = Corpus(path, "text", str(path))
    batches = [batch.texts for batch in corpus.batches(5)]
    assert [len(b) for b in batches] == [5, 5, 5, 5, 3]
    assert sum(batches, []) == texts
    assert corpus.count() == 23


def test_a_line_longer_than_many_blocks(tmp_path):
    path = tmp_path / "corpus.txt"
    long_line = "wörter " * 5000
    path.write_text(f"short\n{long_line}\nend", "utf-8")
    assert [line for _, line in read_lines(path)] == ["short", long_line, "end"]
    blocks = list(read_line_blocks(path, block_bytes=100))
    assert [number for number, _ in blocks] == [1, 2, 3]
