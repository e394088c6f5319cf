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


def random_long_lines(rng: random.Random, lines: int) -> bytes:
    """Lines of 0 to 60 characters, some of them multi-byte, some with a ``\\r`` ending."""
    alphabet = ["a", "b", " ", "é", "中", "😀", "\r"]
    out = []
    for _ in range(lines):
        line = "".join(rng.choice(alphabet) for _ in range(rng.randrange(0, 60))).rstrip("\r")
        out.append(line + rng.choice(["\n", "\r\n"]))
    data = "".join(out).encode("utf-8")
    return data[:-1] if rng.random() < 0.5 else data


@pytest.mark.parametrize("seed", range(8))
@pytest.mark.parametrize("block_bytes", [1, 3, 7, 64, 1 << 20])
@pytest.mark.parametrize("max_chars", [1, 5, 17])
def test_lines_cut_at_max_chars_as_if_read_whole(tmp_path, seed, block_bytes, max_chars):
    rng = random.Random(seed)
    data = random_long_lines(rng, rng.randrange(0, 80))
    path = tmp_path / "corpus.txt"
    path.write_bytes(data)
    whole = lines_one_by_one(data)
    cut_at: list[int] = []
    numbered = [
        (number + i, line)
        for number, lines in read_line_blocks(
            path, block_bytes=block_bytes, max_chars=max_chars, on_cut=cut_at.append
        )
        for i, line in enumerate(lines)
    ]
    assert numbered == [(n, line[:max_chars]) for n, line in enumerate(whole, 1)]
    assert cut_at == [n for n, line in enumerate(whole, 1) if len(line) > max_chars]


def test_a_huge_line_is_never_held_whole(tmp_path, monkeypatch):
    """Of a line longer than the limit only its start is kept: the reader never decodes more
    than about ``4 * max_chars`` bytes of it plus one block, however many blocks it spans."""
    import psp_core.cli.corpus_files as corpus_files

    path = tmp_path / "corpus.txt"
    path.write_bytes(b"short\n" + "é".encode() * 2_000_000 + b"\nend")
    decoded_sizes: list[int] = []
    real_decoded = corpus_files._decoded_lines

    def decoded(block, number, where):
        decoded_sizes.append(len(block))
        return real_decoded(block, number, where)

    monkeypatch.setattr(corpus_files, "_decoded_lines", decoded)
    cut_at: list[int] = []
    blocks = read_line_blocks(path, block_bytes=1 << 16, max_chars=1000, on_cut=cut_at.append)
    lines = [(number + i, line) for number, block in blocks for i, line in enumerate(block)]
    assert lines == [(1, "short"), (2, "é" * 1000), (3, "end")]
    assert cut_at == [2]
    assert max(decoded_sizes) <= 4 * 1000 + 8 + (1 << 16)


def test_text_corpus_counts_its_cut_lines(tmp_path):
    path = tmp_path / "corpus.txt"
    path.write_text("ok\n" + "x" * 50 + "\nfine\n" + "y" * 51, "utf-8")
    corpus = Corpus(path, "text", "corpus.txt", max_chars=40)
    texts = [t for batch in corpus.batches(10) for t in batch.texts]
    assert texts == ["ok", "x" * 40, "fine", "y" * 40]
    assert (corpus.truncations.count, corpus.truncations.first) == (2, "corpus.txt:2")
    assert "2 records were longer than 40 characters" in corpus.truncations.summary()


def test_batches_hold_a_bounded_number_of_characters(tmp_path, monkeypatch):
    monkeypatch.setattr("psp_core.cli.corpus_files.BATCH_CHARS", 100)
    monkeypatch.setattr("psp_core.cli.corpus_files.LINE_BLOCK_BYTES", 64)
    lines = ["a" * 30] * 10 + ["b"] * 300
    path = tmp_path / "corpus.txt"
    path.write_text("\n".join(lines), "utf-8")
    batches = [batch.texts for batch in Corpus(path, "text", "c").batches(50)]
    assert sum(batches, []) == lines
    assert all(sum(map(len, b)) <= 100 and len(b) <= 50 for b in batches)


def test_jsonl_text_values_are_cut_and_a_line_too_long_is_named(tmp_path):
    path = tmp_path / "corpus.jsonl"
    path.write_text('{"text": "ok"}\n{"text": "' + "z" * 30 + '"}\n', "utf-8")
    corpus = Corpus(path, "jsonl", "corpus.jsonl", max_chars=20)
    assert [t for b in corpus.batches(5) for t in b.texts] == ["ok", "z" * 20]
    assert corpus.truncations.first == "corpus.jsonl:2"
    # a line that cannot hold a text of the limit and other fields is refused, naming it
    too_long = '{"text": "a", "other": "' + "q" * (12 * 20 + (1 << 16)) + '"}\n'
    path.write_text('{"text": "ok"}\n' + too_long, "utf-8")
    with pytest.raises(CorpusError, match=r"corpus\.jsonl:2: a JSON Lines line longer than"):
        Corpus(path, "jsonl", "corpus.jsonl", max_chars=20).count()
