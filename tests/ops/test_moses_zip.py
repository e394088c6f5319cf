"""read_moses_zip_batches(): member choice, language order, lockstep reading, skips, hostile zips."""

from __future__ import annotations

import io
import zipfile
from pathlib import Path

import pytest

from ops.sources.moses_zip import UnsafeZipError, read_moses_zip_batches
from ops.stage_report import StageReport
from tests.ops.opus_server import build_moses_zip

ENGLISH = ["a house", "the cat sleeps", "good morning"]
GERMAN = ["ein Haus", "die Katze schläft", "guten Morgen"]


def write_zip(tmp_path: Path, data: bytes, name: str = "corpus.zip") -> Path:
    path = tmp_path / name
    path.write_bytes(data)
    return path


def read_all(path: Path, src_lang: str, tgt_lang: str, corpus: str = "Demo"):
    report = StageReport("read")
    batches = read_moses_zip_batches(
        path, corpus=corpus, src_lang=src_lang, tgt_lang=tgt_lang, report=report
    )
    pairs = [
        pair
        for sources, targets in batches
        for pair in zip(sources.to_pylist(), targets.to_pylist(), strict=True)
    ]
    return pairs, report


@pytest.mark.parametrize(
    ("src_lang", "tgt_lang", "expected"),
    [
        ("en", "de", list(zip(ENGLISH, GERMAN, strict=True))),
        ("de", "en", list(zip(GERMAN, ENGLISH, strict=True))),
    ],
)
def test_sides_come_back_in_the_requested_order(
    tmp_path: Path, src_lang: str, tgt_lang: str, expected: list
) -> None:
    # the zip is named de-en whatever order the languages are given in
    path = write_zip(tmp_path, build_moses_zip("Demo", "en", "de", ENGLISH, GERMAN))
    assert "Demo.de-en.de" in zipfile.ZipFile(path).namelist()
    pairs, report = read_all(path, src_lang, tgt_lang)
    assert pairs == expected
    assert (report.n_in, dict(report.dropped)) == (3, {})


def test_region_coded_member_is_found(tmp_path: Path) -> None:
    path = write_zip(tmp_path, build_moses_zip("OpenSubtitles", "en", "zh_cn", ENGLISH, GERMAN))
    pairs, _ = read_all(path, "en", "zh_cn", corpus="OpenSubtitles")
    assert pairs == list(zip(ENGLISH, GERMAN, strict=True))


def test_empty_undecodable_and_line_endings(tmp_path: Path) -> None:
    english = ["kept one\r", "", "  ", "bad other side", "kept\rtwo", "x"]
    other: list[str | bytes] = ["eins", "leer", "leer", b"caf\xe9", "zwei", b"\xff\xfe"]
    path = write_zip(tmp_path, build_moses_zip("Demo", "en", "de", english, other))
    pairs, report = read_all(path, "en", "de")
    assert pairs == [("kept one", "eins"), ("kept two", "zwei")]
    assert report.n_in == 6
    assert dict(report.dropped) == {"empty": 2, "undecodable": 2}


@pytest.mark.parametrize(
    ("english", "german", "shorter_member", "line"),
    [
        (ENGLISH, GERMAN[:2], "Demo.de-en.de", 2),
        (ENGLISH[:1], GERMAN, "Demo.de-en.en", 1),
    ],
)
def test_unequal_sides_are_an_error_naming_zip_members_and_line(
    tmp_path: Path, english: list, german: list, shorter_member: str, line: int
) -> None:
    path = write_zip(tmp_path, build_moses_zip("Demo", "en", "de", english, german))
    with pytest.raises(ValueError, match="not line-aligned") as caught:
        read_all(path, "en", "de")
    message = str(caught.value)
    assert f"{path}:{shorter_member} ends after line {line}" in message
    assert "Demo.de-en.en" in message and "Demo.de-en.de" in message


def test_missing_side_is_a_clear_error(tmp_path: Path) -> None:
    path = write_zip(tmp_path, build_moses_zip("Tanzil", "en", "de", ENGLISH, GERMAN))
    with pytest.raises(ValueError, match=r"corpus 'Tanzil' for en-tr: .* no member ending in"):
        read_all(path, "en", "tr", corpus="Tanzil")


@pytest.mark.parametrize(
    "member",
    ["../../evil", "/tmp/evil", "sub/../../evil", "..\\evil", "C:/evil", "C:\\evil"],
)
def test_zip_with_escaping_member_names_is_rejected(tmp_path: Path, member: str) -> None:
    work = tmp_path / "work"
    work.mkdir()
    data = build_moses_zip("Demo", "en", "de", ENGLISH, GERMAN, extra_members={member: b"pwned"})
    path = write_zip(work, data)
    with pytest.raises(UnsafeZipError, match="unsafe member name"):
        read_all(path, "en", "de")
    written = sorted(str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*"))
    assert written == ["work", "work/corpus.zip"]


def test_crc_corruption_surfaces_while_reading(tmp_path: Path) -> None:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_STORED) as archive:
        archive.writestr("Demo.de-en.en", "".join(f"sentence {i}\n" for i in range(50)))
        archive.writestr("Demo.de-en.de", "".join(f"Satz {i}\n" for i in range(50)))
    path = write_zip(tmp_path, buffer.getvalue().replace(b"sentence 42", b"sentence 43"))
    with pytest.raises(zipfile.BadZipFile, match="CRC"):
        read_all(path, "en", "de")
