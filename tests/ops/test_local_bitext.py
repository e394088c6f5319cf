"""import_local_bitext(): NAME.en + NAME.<lang> files (plain or .gz), concatenated by NAME."""

from __future__ import annotations

import gzip
from itertools import islice
from pathlib import Path

import pytest

from ops.pairs.pair_files import iter_pairs, pair_file_info
from ops.sources.local_bitext import import_local_bitext
from ops.sources.text_io import open_text
from tests.conftest import require_shared_data


def write_lines(path: Path, lines: list[str | bytes]) -> None:
    body = b"".join((x if isinstance(x, bytes) else x.encode()) + b"\n" for x in lines)
    path.write_bytes(gzip.compress(body) if path.suffix == ".gz" else body)


def test_several_names_are_concatenated_in_sorted_order(tmp_path: Path) -> None:
    write_lines(tmp_path / "b_news.en.gz", ["news one", "news two"])
    write_lines(tmp_path / "b_news.ru.gz", ["новость один", "новость два"])
    write_lines(tmp_path / "a_talks.en", ["talk one", "", "talk three\r", "talk four"])
    write_lines(tmp_path / "a_talks.ru", ["доклад один", "пусто", "доклад три", b"\xd0"])
    write_lines(tmp_path / "a_talks.origin", ["ted"] * 4)  # ignored
    write_lines(tmp_path / "b_news.de.gz", ["ignored too", "other language"])
    output = tmp_path / "out" / "pairs.parquet"
    report = import_local_bitext(tmp_path, lang="ru", output=output)
    assert pair_file_info(output) == (4, "en", "ru", False)
    assert list(iter_pairs(output)) == [
        ("talk one", "доклад один"),
        ("talk three", "доклад три"),
        ("news one", "новость один"),
        ("news two", "новость два"),
    ]
    assert (report.n_in, report.n_out, dict(report.dropped)) == (
        6,
        4,
        {"empty": 1, "undecodable": 1},
    )


@pytest.mark.parametrize(
    ("files", "error", "message"),
    [
        ({"c.en": ["x"]}, FileNotFoundError, r"c\.en has no partner: expected .*c\.de \(or \.gz\)"),
        ({"c.de.gz": ["x"]}, FileNotFoundError, r"c\.de\.gz has no partner: expected .*c\.en"),
        ({"c.en": ["x"], "c.en.gz": ["x"], "c.de": ["y"]}, ValueError, "both c.en and c.en.gz"),
        ({"c.en": ["x", "y"], "c.de": ["x"]}, ValueError, r"c\.de ends after line 1"),
        ({"README": ["x"]}, FileNotFoundError, r"no bitext: expected files NAME\.en and NAME\.de"),
    ],
    ids=["no-de", "no-en", "plain-and-gz", "unequal", "empty-dir"],
)
def test_bad_layouts_are_clear_errors(
    tmp_path: Path, files: dict[str, list[str]], error: type, message: str
) -> None:
    for name, lines in files.items():
        write_lines(tmp_path / name, lines)
    output = tmp_path / "pairs.parquet"
    with pytest.raises(error, match=message):
        import_local_bitext(tmp_path, lang="de", output=output)
    assert not output.exists()


def test_missing_directory(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="nowhere does not exist"):
        import_local_bitext(tmp_path / "nowhere", lang="de", output=tmp_path / "o.parquet")


@pytest.mark.real_data
def test_shared_en_de_bitext(tmp_path: Path) -> None:
    directory = require_shared_data("bitext", "en-de")
    output = tmp_path / "en-de.parquet"
    report = import_local_bitext(directory, lang="de", output=output)
    assert (report.n_out, pair_file_info(output)) == (95_379, (95_379, "en", "de", False))
    with open_text(directory / "combined.en.gz") as english:
        expected_english = [line.rstrip("\n") for line in islice(english, 1000)]
    with open_text(directory / "combined.de.gz") as german:
        expected_german = [line.rstrip("\n") for line in islice(german, 1000)]
    expected = list(zip(expected_english, expected_german, strict=True))
    assert list(islice(iter_pairs(output), 1000)) == expected
