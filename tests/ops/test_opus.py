"""fetch_opus_bitext() against a loopback OPUS API: resolution, order, codes, caps, cache, errors."""

from __future__ import annotations

from functools import partial
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from ops.pairs.pair_files import iter_pairs, pair_file_info
from ops.sources import opus
from ops.sources.moses_zip import UnsafeZipError, read_moses_zip_batches
from ops.sources.opus import (
    OpusCorpus,
    OpusError,
    corpora_from_config,
    fetch_opus_bitext,
    paper_corpora,
    rebase_url,
)
from tests.ops.opus_server import Fault, OpusServer, build_moses_zip

FAST = {"backoff": 0.001, "timeout": 10}


def parallel(corpus: str, lang: str, n: int) -> tuple[list[str], list[str]]:
    english = [f"{corpus} english sentence {i}" for i in range(n)]
    return english, [f"{corpus} {lang} Satz {i}" for i in range(n)]


def serve(server: OpusServer, corpus: str, version: str, code: str, n: int, **zip_args) -> str:
    english, other = parallel(corpus, code, n)
    data = build_moses_zip(corpus, "en", code, english, other, **zip_args)
    return server.add_corpus(corpus, version, "en", code, data)


def fetch(server: OpusServer, tmp_path: Path, lang: str, corpora: list[OpusCorpus], **kwargs):
    output = tmp_path / "out" / f"raw_{lang}.parquet"
    report = fetch_opus_bitext(
        lang, corpora, tmp_path / "cache", output, api_base=server.api_url, **FAST, **kwargs
    )
    return output, report


@pytest.mark.parametrize(
    ("lang", "corpus", "code", "zip_name"),
    [
        ("de", OpusCorpus("Tanzil", "v1"), "de", "de-en.txt.zip"),  # en second: swapped
        ("es", OpusCorpus("Tanzil", "v1"), "es", "en-es.txt.zip"),  # en first
        ("ar", OpusCorpus("MultiUN", "v1"), "ar", "ar-en.txt.zip"),
        ("zh", OpusCorpus("OpenSubtitles", "v2018"), "zh_cn", "en-zh_cn.txt.zip"),
        ("zh", OpusCorpus("GlobalVoices", "v2017q3"), "zhs", "en-zhs.txt.zip"),
        ("pt", OpusCorpus("Tanzil", "v1", codes={"pt": "pt_br"}), "pt_br", "en-pt_br.txt.zip"),
    ],
    ids=["de-en", "en-es", "ar-en", "zh_cn", "zhs", "explicit-codes"],
)
def test_english_is_always_src_and_tgt_lang_is_the_partition_code(
    opus_server: OpusServer,
    tmp_path: Path,
    lang: str,
    corpus: OpusCorpus,
    code: str,
    zip_name: str,
) -> None:
    path = serve(opus_server, corpus.name, corpus.version, code, 20)
    assert path.endswith(zip_name)
    output, report = fetch(opus_server, tmp_path, lang, [corpus])
    assert pair_file_info(output) == (20, "en", lang, False)
    english, other = parallel(corpus.name, code, 20)
    assert list(iter_pairs(output)) == list(zip(english, other, strict=True))
    assert (report.n_in, report.n_out, dict(report.dropped)) == (20, 20, {})
    cached = tmp_path / "cache" / "opus" / corpus.name / corpus.version / zip_name
    assert cached.is_file()


def test_mixture_is_concatenated_whole_labelled_and_counted_per_corpus(
    opus_server: OpusServer, tmp_path: Path
) -> None:
    """Caps are not applied here (they apply after the filters, ops.pairs.corpus_caps): every corpus is
    read and written whole, each pair labelled with its corpus."""
    serve(opus_server, "OpenSubtitles", "v2018", "de", 30)
    english, other = parallel("Tanzil", "de", 6)
    english[1], other[4] = "", b"\xff broken"
    opus_server.add_corpus(
        "Tanzil", "v1", "en", "de", build_moses_zip("Tanzil", "en", "de", english, other)
    )
    serve(opus_server, "GlobalVoices", "v2017q3", "de", 4)
    corpora = [
        OpusCorpus("OpenSubtitles", "v2018", cap=12),
        OpusCorpus("Tanzil", "v1"),
        OpusCorpus("GlobalVoices", "v2017q3", cap=10),
    ]
    output, report = fetch(opus_server, tmp_path, "de", corpora)
    pairs = list(iter_pairs(output))
    assert [p[0] for p in pairs[:30]] == parallel("OpenSubtitles", "de", 30)[0]
    assert [p[0] for p in pairs[30:34]] == [english[i] for i in (0, 2, 3, 5)]
    assert [p[0] for p in pairs[34:]] == parallel("GlobalVoices", "de", 4)[0]
    labels = pq.read_table(output, columns=["corpus"]).column("corpus").to_pylist()
    assert labels == ["OpenSubtitles"] * 30 + ["Tanzil"] * 4 + ["GlobalVoices"] * 4
    summary = report.as_dict()
    assert (summary["n_in"], summary["n_out"]) == (40, 38)
    assert summary["dropped"] == {"empty": 1, "undecodable": 1}
    per_corpus = {
        name: (part["n_in"], part["n_out"], part["dropped"])
        for name, part in summary["corpora"].items()
    }
    assert per_corpus == {
        "OpenSubtitles": (30, 30, {}),
        "Tanzil": (6, 4, {"empty": 1, "undecodable": 1}),
        "GlobalVoices": (4, 4, {}),
    }


def test_cached_zips_are_not_fetched_again(opus_server: OpusServer, tmp_path: Path) -> None:
    serve(opus_server, "Tanzil", "v1", "de", 10)
    serve(opus_server, "GlobalVoices", "v2017q3", "de", 5)
    corpora = [OpusCorpus("Tanzil", "v1"), OpusCorpus("GlobalVoices", "v2017q3")]
    first, _ = fetch(opus_server, tmp_path, "de", corpora)
    assert opus_server.count() == 4  # two API calls, two zips
    expected = list(iter_pairs(first))
    first.unlink()
    second, report = fetch(opus_server, tmp_path, "de", corpora)
    assert opus_server.count() == 4 and opus_server.count(method="HEAD") == 0
    assert list(iter_pairs(second)) == expected and report.n_out == 15


def test_latest_version_is_resolved_through_the_api_and_cached_under_it(
    opus_server: OpusServer, tmp_path: Path
) -> None:
    serve(opus_server, "Tanzil", "v1", "de", 3)
    fetch(opus_server, tmp_path, "de", [OpusCorpus("Tanzil", "latest")])
    assert (tmp_path / "cache" / "opus" / "Tanzil" / "v1" / "de-en.txt.zip").is_file()


def test_download_base_rewrites_the_advertised_host(
    opus_server: OpusServer, tmp_path: Path
) -> None:
    serve(opus_server, "Tanzil", "v1", "de", 7)
    opus_server.advertised_base = "https://object.pouta.csc.fi"
    output, _ = fetch(
        opus_server,
        tmp_path,
        "de",
        [OpusCorpus("Tanzil", "v1")],
        download_base=opus_server.base_url,
    )
    assert pair_file_info(output)[0] == 7
    assert opus_server.count("/OPUS-Tanzil/v1/moses/de-en.txt.zip") == 1


def test_dropped_and_failing_downloads_recover(opus_server: OpusServer, tmp_path: Path) -> None:
    path = serve(opus_server, "Tanzil", "v1", "de", 3000)
    opus_server.fail(path, Fault(status=500), Fault(drop_after=5_000))
    output, report = fetch(opus_server, tmp_path, "de", [OpusCorpus("Tanzil", "v1")])
    assert report.n_out == 3000
    assert opus_server.ranges(path) == [None, None, "bytes=5000-"]


@pytest.mark.parametrize(
    ("setup", "corpus", "message"),
    [
        (
            lambda s: s.fail(serve(s, "Tanzil", "v1", "de", 3), Fault(status=404, times=9)),
            OpusCorpus("Tanzil", "v1"),
            r"corpus 'Tanzil' v1 for en-de: download of http://127\.0\.0\.1:\d+/OPUS-Tanzil/v1/"
            r"moses/de-en\.txt\.zip failed: HTTP 404",
        ),
        (
            lambda s: serve(s, "Tanzil", "v1", "fr", 3),
            OpusCorpus("Tanzil", "v1"),
            r"corpus 'Tanzil' v1 for en-de: the OPUS API answer from http://127\.0\.0\.1:\d+/"
            r"opusapi/\?source=de&target=en&corpus=Tanzil&version=v1&preprocessing=moses lists "
            r"no moses zip for de-en",
        ),
        (
            lambda s: serve(s, "Tanzil", "v1", "de", 3),
            OpusCorpus("Tanzil", "v2"),
            r"corpus 'Tanzil' v2 for en-de: .* lists no moses zip",
        ),
        (
            lambda s: s.fail(
                serve(s, "Tanzil", "v1", "de", 3000), Fault(truncate_to=9_000, times=9)
            ),
            OpusCorpus("Tanzil", "v1"),
            r"corpus 'Tanzil' v1 for en-de: .*de-en\.txt\.zip\.part is not a complete zip",
        ),
    ],
    ids=["404", "pair-missing", "version-missing", "truncated-zip"],
)
def test_failures_are_clear_errors_and_leave_no_output(
    opus_server: OpusServer, tmp_path: Path, setup, corpus: OpusCorpus, message: str
) -> None:
    setup(opus_server)
    with pytest.raises(OpusError, match=message):
        fetch(opus_server, tmp_path, "de", [corpus])
    assert not (tmp_path / "out" / "raw_de.parquet").exists()
    assert not list((tmp_path / "cache").rglob("*.zip"))


def test_zip_with_escaping_member_is_rejected_and_nothing_lands_outside(
    opus_server: OpusServer, tmp_path: Path
) -> None:
    work = tmp_path / "work"
    serve(opus_server, "Tanzil", "v1", "de", 3, extra_members={"../../evil": b"pwned"})
    with pytest.raises(UnsafeZipError, match="'../../evil'"):
        fetch(opus_server, work, "de", [OpusCorpus("Tanzil", "v1")])
    outside = [p for p in tmp_path.rglob("*") if not p.is_relative_to(work)]
    assert outside == []
    assert not [p for p in tmp_path.rglob("*evil*")]
    assert not (work / "out" / "raw_de.parquet").exists()


@pytest.mark.parametrize(
    ("lang", "expected"),
    [
        ("de", [("OpenSubtitles", "v2018", 4_000_000), ("Tanzil", "v1", None),
                ("GlobalVoices", "v2017q3", None)]),
        ("es", [("OpenSubtitles", "v2018", 4_000_000), ("Tanzil", "v1", None),
                ("Europarl", "v8", None), ("GlobalVoices", "v2017q3", None)]),
        ("zh", [("OpenSubtitles", "v2018", 4_000_000), ("Tanzil", "v1", None),
                ("GlobalVoices", "v2017q3", None), ("MultiUN", "v1", 4_000_000)]),
        ("tr", [("OpenSubtitles", "v2018", 4_000_000), ("Tanzil", "v1", None),
                ("GlobalVoices", "v2017q3", None)]),
    ],
)  # fmt: skip
def test_paper_corpora(lang: str, expected: list) -> None:
    assert [(c.name, c.version, c.cap) for c in paper_corpora(lang)] == expected


@pytest.mark.parametrize(
    ("lang", "opus_codes"),
    [("zh", ["zh_cn", "zh", "zhs", "zh"]), ("ru", ["ru", "ru", "ru", "ru"])],
)
def test_paper_corpora_language_codes(lang: str, opus_codes: list[str]) -> None:
    assert [c.opus_code(lang) for c in paper_corpora(lang)] == opus_codes


def test_paper_corpora_unknown_language_and_config_parsing() -> None:
    with pytest.raises(ValueError, match="no OPUS mixture for 'it'"):
        paper_corpora("it")
    parsed = corpora_from_config(
        [{"name": "Tanzil", "version": "v1"}, {"name": "X", "version": "v2", "cap": 5,
                                               "codes": {"zh": "zh_tw"}}]
    )  # fmt: skip
    assert parsed[1].cap == 5 and parsed[1].opus_code("zh") == "zh_tw"
    with pytest.raises(ValueError, match="unknown: \\['limit'\\]"):
        corpora_from_config([{"name": "Tanzil", "version": "v1", "limit": 3}])


@pytest.mark.parametrize(
    ("url", "base", "expected"),
    [
        ("https://object.pouta.csc.fi/OPUS-Tanzil/v1/moses/de-en.txt.zip", None,
         "https://object.pouta.csc.fi/OPUS-Tanzil/v1/moses/de-en.txt.zip"),
        ("https://object.pouta.csc.fi/OPUS-Tanzil/v1/moses/de-en.txt.zip", "http://127.0.0.1:8000",
         "http://127.0.0.1:8000/OPUS-Tanzil/v1/moses/de-en.txt.zip"),
        ("https://object.pouta.csc.fi/OPUS-Tanzil/v1/moses/de-en.txt.zip", "https://mirror.org/opus/",
         "https://mirror.org/opus/OPUS-Tanzil/v1/moses/de-en.txt.zip"),
    ],
)  # fmt: skip
def test_rebase_url(url: str, base: str | None, expected: str) -> None:
    assert rebase_url(url, base) == expected


def test_corrupt_cached_zip_is_named_with_what_to_do(tmp_path: Path) -> None:
    english, german = parallel("Tanzil", "de", 50)
    data = build_moses_zip("Tanzil", "en", "de", english, german)
    # the sides are deflated; flipping a byte inside one breaks its CRC or its stream
    start = data.index(b"Tanzil.de-en.de") + 40
    corrupt = data[:start] + bytes([data[start] ^ 0xFF]) + data[start + 1 :]
    cached = tmp_path / "cache" / "opus" / "Tanzil" / "v1" / "de-en.txt.zip"
    cached.parent.mkdir(parents=True)
    cached.write_bytes(corrupt)
    with pytest.raises(OpusError, match=r"cached zip .*de-en\.txt\.zip is corrupt .* delete it"):
        fetch_opus_bitext(
            "de", [OpusCorpus("Tanzil", "v1")], tmp_path / "cache", tmp_path / "out.parquet",
            api_base="http://127.0.0.1:9/unused/",
        )  # fmt: skip
    assert not (tmp_path / "out.parquet").exists()


def test_every_line_is_read_and_counted_across_read_batches(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    # batches of 3 line pairs, with skips on both sides, inside and between batches
    monkeypatch.setattr(
        opus, "read_moses_zip_batches", partial(read_moses_zip_batches, batch_size=3)
    )
    english, other = parallel("Tanzil", "de", 16)
    english[1], other[4], english[6], other[7], english[15] = "", b"\xff", " ", b"\xc3", "\t"
    cached = tmp_path / "cache" / "opus" / "Tanzil" / "v1" / "de-en.txt.zip"
    cached.parent.mkdir(parents=True)
    cached.write_bytes(build_moses_zip("Tanzil", "en", "de", english, other))
    output = tmp_path / "out.parquet"
    report = fetch_opus_bitext(
        "de", [OpusCorpus("Tanzil", "v1", cap=3)], tmp_path / "cache", output,
        api_base="http://127.0.0.1:9/unused/",
    )  # fmt: skip
    valid = [i for i in range(16) if i not in (1, 4, 6, 7, 15)]
    assert [src for src, _ in iter_pairs(output)] == [english[i] for i in valid]
    expected = {"empty": 3, "undecodable": 2}
    assert (report.n_in, report.n_out, dict(report.dropped)) == (16, len(valid), expected)


# ---------------------------------------------------------------------------------------------
# language codes per corpus and release: OpenSubtitles spells Simplified Chinese zh_cn in v2018
# and zh_CN in v2024 (its newest release, the only one the API marks latest)


def publish_opensubtitles_zh(server: OpusServer) -> None:
    serve(server, "OpenSubtitles", "v2018", "zh_cn", 3)
    serve(server, "OpenSubtitles", "v2024", "zh_CN", 5)


@pytest.mark.parametrize(
    ("version", "expected_version", "expected_code"),
    [("latest", "v2024", "zh_CN"), ("v2024", "v2024", "zh_CN"), ("v2018", "v2018", "zh_cn")],
)
def test_zh_is_found_in_every_opensubtitles_release_and_the_code_used_is_recorded(
    opus_server: OpusServer,
    tmp_path: Path,
    version: str,
    expected_version: str,
    expected_code: str,
) -> None:
    publish_opensubtitles_zh(opus_server)
    corpus = OpusCorpus("OpenSubtitles", version)  # the default codes: zh -> zh_cn
    output, report = fetch(opus_server, tmp_path, "zh", [corpus])
    english, chinese = parallel(
        "OpenSubtitles", expected_code, 5 if expected_version == "v2024" else 3
    )
    assert list(iter_pairs(output)) == list(zip(english, chinese, strict=True))
    assert pair_file_info(output)[2] == "zh"
    [part] = report.as_dict()["corpora"].values()
    assert (part["version"], part["opus_code"]) == (expected_version, expected_code)
    cached = tmp_path / "cache" / "opus" / "OpenSubtitles" / expected_version
    assert (cached / f"en-{expected_code}.txt.zip").is_file()


def test_a_zip_cached_under_the_codes_other_case_is_used_without_a_request(
    opus_server: OpusServer, tmp_path: Path
) -> None:
    publish_opensubtitles_zh(opus_server)
    corpora = [OpusCorpus("OpenSubtitles", "v2024")]
    first, _ = fetch(opus_server, tmp_path, "zh", corpora)
    asked = opus_server.count()
    expected = list(iter_pairs(first))
    first.unlink()
    again, report = fetch(opus_server, tmp_path, "zh", corpora)
    assert opus_server.count() == asked  # no API call, no download
    assert list(iter_pairs(again)) == expected
    assert report.as_dict()["corpora"]["OpenSubtitles"]["opus_code"] == "zh_CN"


@pytest.mark.parametrize(
    ("listed", "codes", "expected"),
    [
        (["zh"], None, "zh"),  # Tanzil's spelling
        (["zh_cn", "zh_tw"], None, "zh_cn"),
        (["zh_TW", "zh_CN"], None, "zh_CN"),
        (["zhs", "zht"], None, "zhs"),
        (["ZHS"], None, "ZHS"),
        (["zh"], {"zh": "zhs"}, "zh"),  # a configured code the release lacks: its aliases
        (["zh", "zh_cn"], {"zh": "zh_cn"}, "zh_cn"),  # the configured code first
    ],
)
def test_aliases_of_a_code_are_tried_in_order_case_insensitively(
    opus_server: OpusServer, tmp_path: Path, listed: list[str], codes, expected: str
) -> None:
    for code in listed:
        serve(opus_server, "Tanzil", "v1", code, 4)
    output, report = fetch(opus_server, tmp_path, "zh", [OpusCorpus("Tanzil", "v1", codes=codes)])
    assert [tgt for _, tgt in iter_pairs(output)] == parallel("Tanzil", expected, 4)[1]
    assert report.as_dict()["corpora"]["Tanzil"]["opus_code"] == expected


def test_a_release_without_the_language_names_the_codes_it_has(
    opus_server: OpusServer, tmp_path: Path
) -> None:
    serve(opus_server, "Tanzil", "v1", "zht", 2)
    serve(opus_server, "Tanzil", "v1", "de", 2)
    with pytest.raises(
        OpusError,
        match=r"lists no moses zip for en-zh \(nor under \['zh_cn', 'zhs'\]\); codes starting with "
        r"'zh' it lists: \['zht'\]; check",
    ):
        fetch(opus_server, tmp_path, "zh", [OpusCorpus("Tanzil", "v1")])


def test_newest_release_finds_the_newest_spelling(opus_server: OpusServer) -> None:
    publish_opensubtitles_zh(opus_server)
    serve(opus_server, "Tanzil", "v1", "de", 2)
    session = opus.retrying_session(0)
    newest = partial(opus.newest_opus_release, api_base=opus_server.api_url, session=session)
    assert newest(OpusCorpus("OpenSubtitles", "v2018"), "zh") == ("v2024", "zh_CN")
    assert newest(OpusCorpus("Tanzil", "v1"), "de") == ("v1", "de")
    assert newest(OpusCorpus("Tanzil", "v1"), "fr") is None
