"""fetch_paranmt(): zip (downloaded or local), .txt and .txt.gz, three columns (with the score) or
two (without); malformed lines are counted skips; no default source, and never the dead URL."""

from __future__ import annotations

import gzip
import io
import zipfile
from collections import Counter
from pathlib import Path

import pytest

from ops.cleaning.filters import filter_pairs
from ops.pairs.pair_files import iter_pair_chunks, pair_file_info
from ops.sources import paranmt
from ops.sources.paranmt import fetch_paranmt
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
    with pytest.raises(paranmt.ParaNmtSourceError, match="missing.zip does not exist"):
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


def words(n: int, prefix: str = "w") -> str:
    return " ".join(f"{prefix}{i}" for i in range(n))


DEAD_URL = "http://phontron.com/data/para-nmt-50m.zip"


@pytest.mark.parametrize("value", [None, "", "  ", DEAD_URL, DEAD_URL.replace("http:", "https:")])
def test_there_is_no_default_source_and_the_dead_url_is_refused(value) -> None:
    assert getattr(paranmt, "PARANMT_URL", None) is None
    with pytest.raises(paranmt.ParaNmtSourceError) as caught:
        paranmt.paranmt_source(value)
    assert "\n" not in str(caught.value)
    with pytest.raises(paranmt.ParaNmtSourceError):
        fetch_paranmt(value, "/nonexistent/cache", "/nonexistent/out.parquet")


def test_a_source_is_a_path_a_file_url_or_an_http_url(tmp_path: Path) -> None:
    source = tmp_path / "para nmt.txt"
    source.write_bytes(BODY)
    assert paranmt.paranmt_source(str(source)) == source
    assert paranmt.paranmt_source(source) == source
    assert paranmt.paranmt_source(source.as_uri()) == source  # file://, spaces quoted
    assert paranmt.paranmt_source("https://example.org/p.zip") == "https://example.org/p.zip"
    with pytest.raises(paranmt.ParaNmtSourceError, match=r"missing\.txt does not exist"):
        paranmt.paranmt_source((tmp_path / "missing.txt").as_uri())
    with pytest.raises(paranmt.ParaNmtSourceError, match="is not a file"):
        paranmt.paranmt_source(tmp_path)
    output = tmp_path / "out.parquet"
    assert_output(output, fetch_paranmt(source.as_uri(), tmp_path / "cache", output))


# (line, reason a line is dropped or None; in raw_pairs, then in the paraphrase filters)
TWO_COLUMN_CASES = [
    (f"{words(6)}\t{words(6, 'v')}", None, None),
    (f"{words(3)}\t{words(3, 'v')}", None, "too_short"),
    (f"{words(12)}\t{words(10)} x y z", None, "trigram_overlap"),
    (f"{words(41)}\t{words(41, 'v')}", None, "too_long"),
    (f"{words(7)}\t{words(8, 'v')}", None, None),
    (f"\t{words(6)}", "empty", None),
    (f"{words(6)}\t{words(6, 'v')}\t0.9", "malformed", None),  # not this file's shape
    ("one field", "malformed", None),
]


def test_a_two_column_file_is_read_without_scores_and_skips_only_the_score_filter(
    tmp_path: Path,
) -> None:
    source = tmp_path / "para-nmt-5m-processed.txt"
    source.write_text("".join(line + "\n" for line, _, _ in TWO_COLUMN_CASES))
    raw = tmp_path / "raw.parquet"
    report = fetch_paranmt(source, tmp_path / "cache", raw).as_dict()
    read = [line for line, reason, _ in TWO_COLUMN_CASES if reason is None]
    assert (report["n_in"], report["n_out"]) == (len(TWO_COLUMN_CASES), len(read))
    assert report["dropped"] == {"empty": 1, "malformed": 2}
    assert report["notes"] == {"unscored": len(read)}
    assert pair_file_info(raw) == (len(read), "en", "en", True)
    [(refs, paras, scores)] = list(iter_pair_chunks(raw))
    assert [f"{r}\t{p}" for r, p in zip(refs, paras, strict=True)] == read
    assert scores == [None] * len(read)

    filtered = filter_pairs(raw, tmp_path / "filtered.parquet", kind="paraphrase").as_dict()
    assert filtered["dropped"] == {"too_short": 1, "too_long": 1, "trigram_overlap": 1}
    assert filtered["notes"] == {"score_filter_skipped": 2}
    [(refs, paras, scores)] = list(iter_pair_chunks(tmp_path / "filtered.parquet"))
    kept = [line for line, reason, drop in TWO_COLUMN_CASES if reason is None and drop is None]
    assert [f"{r}\t{p}" for r, p in zip(refs, paras, strict=True)] == kept


SCORED = [f"{words(6)}\t{words(6, 'v')}\t0.8", f"{words(9)}\t{words(7, 'v')}\t0.2"]
UNSCORED = [f"{words(8)}\t{words(8, 'v')}", f"{words(5)}\t{words(9, 'v')}"]


@pytest.mark.parametrize("first", ["scored", "unscored"])
def test_a_mixed_file_is_read_in_the_shape_of_its_first_pair_and_the_rest_dropped(
    tmp_path: Path, first: str
) -> None:
    """A ParaNMT file has one shape; lines of the other shape (a truncated scored line looks
    like an unscored one) are dropped as malformed, never read with a made-up score."""
    chosen, other = (SCORED, UNSCORED) if first == "scored" else (UNSCORED, SCORED)
    lines = ["no tab here", chosen[0], other[0], chosen[1], other[1]]
    source = tmp_path / "mixed.txt.gz"
    source.write_bytes(gzip.compress("".join(f"{line}\n" for line in lines).encode()))
    raw = tmp_path / "raw.parquet"
    report = fetch_paranmt(source, tmp_path / "cache", raw).as_dict()
    assert (report["n_in"], report["n_out"], report["dropped"]) == (5, 2, {"malformed": 3})
    assert report.get("notes", {}) == ({} if first == "scored" else {"unscored": 2})
    [(refs, paras, scores)] = list(iter_pair_chunks(raw))
    assert [line.split("\t")[0] for line in chosen] == refs
    if first == "scored":
        assert scores == pytest.approx([0.8, 0.2])
    else:
        assert scores == [None, None]
    filtered = filter_pairs(raw, tmp_path / "filtered.parquet", kind="paraphrase").as_dict()
    if first == "scored":  # the score filter applies: 0.2 is too low
        assert (filtered["n_out"], filtered["dropped"]) == (1, {"score_too_low": 1})
        assert "notes" not in filtered
    else:
        assert (filtered["n_out"], filtered["notes"]) == (2, {"score_filter_skipped": 2})
