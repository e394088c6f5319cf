"""aligned_batches() gives exactly what the old per-line reader gave: pairs, counts, errors.

The reference below is the per-line algorithm ``aligned_pairs`` used before reading went block
by block (with ``clean_line``, which the per-line path still uses); the batched reader is
compared with it on hand-picked and seeded random inputs, with tiny blocks and batches so that
lines, multi-byte characters and ``\\r\\n`` straddle every boundary.
"""

from __future__ import annotations

import io
import itertools
import random
import sys
import threading
from itertools import zip_longest

import numpy as np
import pyarrow as pa
import pytest

from ops.sources.moses_zip import WHITESPACE_LEAD_BYTES, aligned_batches, aligned_pairs, clean_line
from ops.stage_report import StageReport

Outcome = tuple[list[tuple[str, str]], int, dict[str, int], str | None]


def reference(left: bytes, right: bytes) -> Outcome:
    """The old ``aligned_pairs`` over ``for line in stream``, one line pair at a time."""
    pairs, n_in, dropped = [], 0, {}
    for number, (first, second) in enumerate(zip_longest(io.BytesIO(left), io.BytesIO(right)), 1):
        if first is None or second is None:
            shorter = "L" if first is None else "R"
            error = (
                f"L and R are not line-aligned: {shorter} ends after line {number - 1} while "
                f"the other side goes on"
            )
            return pairs, n_in, dropped, error
        n_in += 1
        source, target = clean_line(first), clean_line(second)
        if source is None or target is None:
            dropped["undecodable"] = dropped.get("undecodable", 0) + 1
        elif not source.strip() or not target.strip():
            dropped["empty"] = dropped.get("empty", 0) + 1
        else:
            pairs.append((source, target))
    return pairs, n_in, dropped, None


class ShortReads(io.RawIOBase):
    """A binary stream whose ``read(n)`` returns 1..n bytes at random, like a pipe or gzip."""

    def __init__(self, data: bytes, seed: int) -> None:
        self._data, self._position, self._rng = data, 0, random.Random(seed)

    def readable(self) -> bool:
        return True

    def read(self, size: int = -1) -> bytes:
        size = len(self._data) if size < 0 else self._rng.randint(1, max(size, 1))
        chunk = self._data[self._position : self._position + size]
        self._position += len(chunk)
        return chunk


def batched(left, right, *, block_size: int, batch_size: int = 65_536) -> tuple[Outcome, list[int]]:
    """Run aligned_batches; also return the batch lengths."""
    report, pairs, lengths, error = StageReport("read"), [], [], None
    try:
        for sources, targets in aligned_batches(
            left,
            right,
            report,
            left_name="L",
            right_name="R",
            batch_size=batch_size,
            block_size=block_size,
        ):
            assert isinstance(sources, pa.StringArray) and isinstance(targets, pa.StringArray)
            assert len(sources) == len(targets)
            lengths.append(len(sources))
            pairs.extend(zip(sources.to_pylist(), targets.to_pylist(), strict=True))
    except ValueError as caught:
        error = str(caught)
    return (pairs, report.n_in, dict(report.dropped), error), lengths


def check(left: bytes, right: bytes, *, block_size: int, batch_size: int = 65_536) -> Outcome:
    """Assert the batched reader matches the reference; return the reference outcome."""
    expected = reference(left, right)
    outcome, lengths = batched(
        io.BytesIO(left), io.BytesIO(right), block_size=block_size, batch_size=batch_size
    )
    assert outcome == expected, (left, right, block_size, batch_size)
    assert all(0 < length <= batch_size for length in lengths)
    return expected


CASES = {
    "plain": (b"a\nb\nc\n", b"x\ny\nz\n"),
    "crlf-and-lone-cr": (b"one\r\ntw\ro\r\r\n\r\nend\r", b"eins\r\nzwei\n\rdrei\r\nvier\n"),
    "blank-either-side": (b"a\n\n  \nd\n\t\ne\n", b"\nb\nc\n \nx\ny\n"),
    "unicode-whitespace": (b"\xe3\x80\x80\n\xc2\xa0\nok\n\xc2\x85\n", b"x\ny\nz\nw\n"),
    "unicode-whitespace-inside": (b"a\xe3\x80\x80b\n\xc2\xa0a\xc2\xa0\n", b"x\ny\n"),
    "invalid-utf8-either-side": (b"ok\n\xff\ncaf\xe9\nfine\n", b"\xc3\nja\nja\n\xed\xa0\x80\n"),
    "invalid-and-blank-same-pair": (b"\xff\n\n", b"\n\xc0\xaf\n"),
    "multibyte-everywhere": ("äöü\n中文字\n😀 x\n".encode(), "ß\n日本\n🙂\n".encode()),
    "multibyte-cut-by-a-newline": (b"a\xc3\n\xa4b\nok\n", b"x\ny\nz\n"),
    "no-trailing-newline-left": (b"a\nb", b"x\ny\n"),
    "no-trailing-newline-right": (b"a\nb\n", b"x\ny"),
    "only-last-line-cr": (b"a\r", b"b\r\r"),
    "both-empty": (b"", b""),
    "left-empty": (b"", b"x\n"),
    "right-empty": (b"a\n", b""),
    "left-shorter": (b"a\nb\n", b"x\ny\nz\n"),
    "right-shorter": (b"a\nb\nc\nd\n", b"x\n"),
    "single-newlines": (b"\n", b"\n"),
    "newline-vs-nothing": (b"\n", b""),
    "long-lines": (b"a" * 100 + b"\n" + "ä".encode() * 50 + b"\n", b"b" * 77 + b"\nc\n"),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_cases_match_the_per_line_reader(name: str) -> None:
    left, right = CASES[name]
    for block_size in (1, 2, 3, 5, 8, 1 << 20):
        for batch_size in (1, 2, 3, 65_536):
            check(left, right, block_size=block_size, batch_size=batch_size)


def test_the_cases_exercise_what_they_claim() -> None:
    # guards the table above: the reference outcomes are the ones the names promise
    assert reference(*CASES["crlf-and-lone-cr"])[0] == [
        ("one", "eins"),
        ("tw o", "zwei"),
        ("end", "vier"),
    ]
    assert reference(*CASES["crlf-and-lone-cr"])[2] == {"empty": 1}  # " drei" vs ""
    assert reference(*CASES["unicode-whitespace"])[1:3] == (4, {"empty": 3})
    assert reference(*CASES["invalid-utf8-either-side"])[1:3] == (4, {"undecodable": 4})
    assert reference(*CASES["invalid-and-blank-same-pair"])[2] == {"undecodable": 2}
    assert reference(*CASES["left-shorter"])[3] == (
        "L and R are not line-aligned: L ends after line 2 while the other side goes on"
    )
    assert reference(*CASES["right-shorter"])[:2] == ([("a", "x")], 1)
    assert reference(*CASES["newline-vs-nothing"])[3] is not None


def test_multibyte_character_cut_by_a_block_boundary_is_not_undecodable() -> None:
    text = "aä\nbb中\n€x\n"
    for block_size in range(1, 12):
        pairs, n_in, dropped, error = check(
            text.encode(), b"1\n2\n3\n", block_size=block_size, batch_size=2
        )
        assert (dropped, error, n_in) == ({}, None, 3)
        assert pairs == [("aä", "1"), ("bb中", "2"), ("€x", "3")]


def test_the_lines_are_the_same_when_reads_come_back_short() -> None:
    left = "".join(f"zeile {i} ä\r\n" if i % 3 else "\n" for i in range(300)).encode()
    right = "".join(f"line {i}\n" for i in range(300)).encode()
    expected = reference(left, right)
    for seed in range(5):
        outcome, _ = batched(
            ShortReads(left, seed), ShortReads(right, seed + 1), block_size=64, batch_size=7
        )
        assert outcome == expected


def random_line(rng: random.Random) -> bytes:
    text = [b"a", b"Zz", b"x y", b"1.", "ä".encode(), "中".encode(), "😀".encode(), "ß".encode()]
    space = [b" ", b"\t", b"\r", "\u3000".encode(), "\xa0".encode(), "\x85".encode()]
    invalid = [b"\xff", b"\xc3", b"\xe4\xb8", b"\xed\xa0\x80", b"\xc0\xaf", b"\x80"]
    pieces = text + space if rng.random() < 0.3 else text
    line = b"".join(rng.choice(pieces) for _ in range(rng.choice([0, 1, 2, 3, 5, 8, 13])))
    if rng.random() < 0.05:
        at = rng.randint(0, len(line))
        line = line[:at] + rng.choice(invalid) + line[at:]
    return line + (b"\r" * rng.choice([0, 0, 0, 1, 2]))


def random_side(rng: random.Random, n_lines: int) -> bytes:
    body = b"\n".join(random_line(rng) for _ in range(n_lines))
    return body + (b"\n" if n_lines and rng.random() < 0.8 else b"")


def random_case(seed: int) -> tuple[bytes, bytes]:
    """Two sides of 0-40 random lines, of equal length 85% of the time."""
    rng = random.Random(seed)
    n_lines = rng.choice([0, 1, 2, 5, 20, 40])
    other = n_lines if rng.random() < 0.85 else max(0, n_lines + rng.choice([-2, -1, 1, 3]))
    return random_side(rng, n_lines), random_side(rng, other)


@pytest.mark.parametrize("first_seed", range(0, 300, 50))
def test_random_inputs_match_the_per_line_reader(first_seed: int) -> None:
    for seed in range(first_seed, first_seed + 50):
        rng = random.Random(-seed)
        block_size = rng.choice([1, 2, 3, 4, 7, 16, 64, 1 << 20])
        batch_size = rng.choice([1, 2, 5, 16, 65_536])
        check(*random_case(seed), block_size=block_size, batch_size=batch_size)


def test_random_inputs_reach_every_outcome() -> None:
    # the random cases above are only a test if they produce skips of both kinds and errors
    outcomes = [reference(*random_case(seed)) for seed in range(300)]
    dropped = {reason for _, _, drops, _ in outcomes for reason in drops}
    assert dropped == {"empty", "undecodable"}
    assert sum(error is not None for *_, error in outcomes) >= 20
    assert sum(not error and len(pairs) >= 10 for pairs, *_, error in outcomes) >= 50


def test_iterables_of_byte_lines_are_taken_one_item_per_line() -> None:
    # the old aligned_pairs contract: any iterable of byte lines, newline or not
    left = [b"a\r\n", b"b", b"\xff\n", b"  \n", "ä\r".encode()]
    right = [b"x\n", b"y\n", b"z", b"w\n", b"v"]
    report = StageReport("read")
    pairs = list(aligned_pairs(left, right, report, left_name="L", right_name="R"))
    assert pairs == [("a", "x"), ("b", "y"), ("ä", "v")]
    assert (report.n_in, dict(report.dropped)) == (5, {"undecodable": 1, "empty": 1})
    with pytest.raises(ValueError, match="R ends after line 1 while"):
        list(aligned_pairs([b"a", b"b"], [b"x"], StageReport("r"), left_name="L", right_name="R"))


def read_ahead_threads() -> list[threading.Thread]:
    return [thread for thread in threading.enumerate() if thread.name == "read-ahead"]


class CountingReads(io.BytesIO):
    """Counts read() calls and refuses reads once closed, as a zip member does."""

    reads = 0

    def read(self, size: int | None = -1) -> bytes:
        self.reads += 1
        return super().read(size)


def test_stopping_early_stops_the_read_ahead_threads() -> None:
    left = CountingReads(b"".join(b"line %d\n" % i for i in range(5000)))
    right = CountingReads(b"".join(b"zeile %d\n" % i for i in range(5000)))
    batches = aligned_batches(
        left, right, StageReport("r"), left_name="L", right_name="R", batch_size=10, block_size=64
    )
    sources, targets = next(batches)
    assert sources.to_pylist() == [f"line {i}" for i in range(10)]
    assert targets.to_pylist() == [f"zeile {i}" for i in range(10)]
    batches.close()
    assert read_ahead_threads() == []
    reads = left.reads, right.reads
    assert max(reads) < 10  # a few blocks ahead, not the whole stream
    left.close(), right.close()  # a read now would raise; none comes


def test_unequal_sides_stop_the_threads_before_the_error_surfaces() -> None:
    report = StageReport("r")
    with pytest.raises(ValueError, match="R ends after line 3 while"):
        for _ in aligned_batches(
            io.BytesIO(b"a\nb\nc\nd\n"), io.BytesIO(b"x\ny\nz\n"), report,
            left_name="L", right_name="R", block_size=2, batch_size=2,
        ):  # fmt: skip
            pass
    assert read_ahead_threads() == []
    assert report.n_in == 3


def test_a_failing_read_is_raised_to_the_reader() -> None:
    class Broken(io.BytesIO):
        def read(self, size: int | None = -1) -> bytes:
            if self.tell() >= 8:
                raise EOFError("truncated member")
            return super().read(size)

    with pytest.raises(EOFError, match="truncated member"):
        list(
            aligned_pairs(
                Broken(b"a\n" * 10),
                io.BytesIO(b"x\n" * 10),
                StageReport("r"),
                left_name="L",
                right_name="R",
            )  # fmt: skip
        )
    assert read_ahead_threads() == []


WHITESPACE = [chr(c) for c in range(sys.maxunicode + 1) if chr(c).isspace()]


def test_whitespace_lead_bytes_cover_every_whitespace_character() -> None:
    # the blank check only looks closer at lines starting with one of these bytes
    assert set(WHITESPACE_LEAD_BYTES) == {char.encode()[0] for char in WHITESPACE}


def test_every_whitespace_character_is_blank_alone_and_not_beside_text() -> None:
    # "\n" would split the line, so it stands in as the space it is read as anyway
    lines = [line for c in WHITESPACE for line in (c, c * 3, c + "x", "x" + c, f"{c}x{c}")]
    left = "".join(line.replace("\n", " ") + "\n" for line in lines).encode()
    pairs, n_in, dropped, _ = check(left, b"ok\n" * len(lines), block_size=1 << 20)
    assert (n_in, len(pairs), dropped) == (
        len(lines),
        3 * len(WHITESPACE),
        {"empty": 2 * len(WHITESPACE)},
    )


def arrow_accepts(data: bytes) -> bool:
    """Whether the check the reader relies on (a full validation) accepts ``data`` as a string."""
    offsets = np.array([0, len(data)], dtype=np.int32)
    try:
        pa.StringArray.from_buffers(1, pa.py_buffer(offsets), pa.py_buffer(data)).validate(
            full=True
        )
    except pa.ArrowInvalid:
        return False
    return True


def python_accepts(data: bytes) -> bool:
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


def test_arrow_validates_utf8_exactly_as_python_decodes() -> None:
    # a block that Arrow accepts is never decoded by Python, so Arrow must be as strict:
    # sequences of up to 3 bytes from every byte class (both ends), and 4-byte ones
    edges = [0x00, 0x41, 0x7F, 0x80, 0x8F, 0x90, 0x9F, 0xA0, 0xBF, 0xC0, 0xC1, 0xC2, 0xDF]
    edges += [0xE0, 0xE1, 0xEC, 0xED, 0xEE, 0xEF, 0xF0, 0xF1, 0xF3, 0xF4, 0xF5, 0xFF]
    tails = [0x41, 0x80, 0x8F, 0x90, 0xBF, 0xC0]
    sequences = [bytes(s) for n in (1, 2, 3) for s in itertools.product(edges, repeat=n)]
    sequences += [
        bytes([lead, *s]) for lead in (0xF0, 0xF1, 0xF4) for s in itertools.product(tails, repeat=3)
    ]
    verdicts = [(python_accepts(s), arrow_accepts(b"x" + s + b"y")) for s in sequences]
    assert [s for s, (py, arrow) in zip(sequences, verdicts, strict=True) if py != arrow] == []
    valid = sum(py for py, _ in verdicts)
    assert valid > 400 and len(verdicts) - valid > 10_000  # both verdicts, many times
