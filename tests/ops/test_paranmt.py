"""fetch_paranmt(): zip (downloaded or local), .txt and .txt.gz; malformed lines are counted skips."""

from __future__ import annotations

import gzip
import io
import zipfile
from collections import Counter
from pathlib import Path

import pytest

from ops.pair_files import iter_pair_chunks, pair_file_info
from ops.paranmt import fetch_paranmt
from psp_core.files.download import DownloadError
from tests.conftest import require_shared_data
from tests.ops.opus_server import Fault, OpusServer

# (raw line, expected kept (ref, para, score) or None, drop reason)
CASES: list[tuple[bytes, tuple[str, str, float] | None, str | None]] = [
    (b"a man walks .\ta man is walking .\t0.82\n", ("a man walks .", "a man is walking .", 0.82), None),
    (b"crlf line\tcrlf para\t0.5\r\n", ("crlf line", "crlf para", 0.5), None),
    (b"exp score\tpara\t1e-1\n", ("exp score", "para", 0.1), None),
    (b"two fields only\t0.9\n", None, "malformed"),
    (b"four\tfields\there\t0.9\n", None, "malformed"),
    (b"bad score\tpara\tabc\n", None, "malformed"),
    (b"nan score\tpara\tnan\n", None, "malformed"),
    (b"\tempty reference\t0.7\n", None, "empty"),
    (b"caf\xe9\tlatin-1 bytes\t0.7\n", None, "undecodable"),
    (b"\n", None, "malformed"),
]  # fmt: skip
BODY = b"".join(raw for raw, _, _ in CASES)
KEPT = [kept for _, kept, _ in CASES if kept is not None]
DROPS = dict(Counter(reason for _, _, reason in CASES if reason is not None))


def zipped(body: bytes, member: str = "para-nmt-50m/para-nmt-50m.txt") -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        archive.writestr("para-nmt-50m/README", "ParaNMT test copy\n")
        archive.writestr(member, body)
    return buffer.getvalue()


def assert_output(output: Path, report) -> None:
    assert DROPS == {"malformed": 5, "empty": 1, "undecodable": 1}
    assert pair_file_info(output) == (len(KEPT), "en", "en", True)
    [(refs, paras, scores)] = list(iter_pair_chunks(output))
    assert (refs, paras) == ([k[0] for k in KEPT], [k[1] for k in KEPT])
    assert scores == pytest.approx([k[2] for k in KEPT])
    assert (report.n_in, report.n_out, dict(report.dropped)) == (len(CASES), len(KEPT), DROPS)


def test_downloaded_zip_is_streamed_into_a_scored_pair_file(
    opus_server: OpusServer, tmp_path: Path
) -> None:
    url = opus_server.add_file("/data/para-nmt-50m.zip", zipped(BODY))
    opus_server.fail("/data/para-nmt-50m.zip", Fault(drop_after=100))
    output = tmp_path / "paranmt.parquet"
    report = fetch_paranmt(url, tmp_path / "cache", output, backoff=0.001)
    assert_output(output, report)
    assert (tmp_path / "cache" / "paranmt" / "para-nmt-50m.zip").is_file()
    output.unlink()
    fetch_paranmt(url, tmp_path / "cache", output, backoff=0.001)
    assert opus_server.count() == 2  # the dropped attempt and its resume; the re-run hits cache


@pytest.mark.parametrize(
    ("name", "encode"),
    [
        ("para-nmt-50m.txt", lambda body: body),
        ("para-nmt-50m.txt.gz", gzip.compress),
        ("para-nmt-50m.zip", lambda body: zipped(body, member="para-nmt-50m.txt")),
    ],
)
def test_local_files_are_read_in_place(tmp_path: Path, name: str, encode) -> None:
    source = tmp_path / name
    source.write_bytes(encode(BODY))
    output = tmp_path / "out.parquet"
    assert_output(output, fetch_paranmt(source, tmp_path / "cache", output))
    assert not (tmp_path / "cache").exists()


def test_bad_sources_are_clear_errors(opus_server: OpusServer, tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="missing.zip does not exist"):
        fetch_paranmt(tmp_path / "missing.zip", tmp_path / "cache", tmp_path / "o.parquet")
    wrong = tmp_path / "other.zip"
    wrong.write_bytes(zipped(b"x\ty\t1\n", member="a.tsv"))
    with pytest.raises(ValueError, match="expected one member named 'para-nmt-50m.txt'"):
        fetch_paranmt(wrong, tmp_path / "cache", tmp_path / "o.parquet")
    url = opus_server.base_url + "/data/para-nmt-50m.zip"
    with pytest.raises(DownloadError, match="HTTP 404"):
        fetch_paranmt(url, tmp_path / "cache", tmp_path / "o.parquet", backoff=0.001)
    assert not (tmp_path / "o.parquet").exists()


@pytest.mark.real_data
def test_shared_paranmt_format_sample(tmp_path: Path) -> None:
    source = require_shared_data("paraphrase", "paranmt-format-sample.txt.gz")
    report = fetch_paranmt(source, tmp_path / "cache", tmp_path / "out.parquet")
    assert report.n_in == 60_899
    assert report.n_out + sum(report.dropped.values()) == 60_899
    assert report.n_out > 60_000
