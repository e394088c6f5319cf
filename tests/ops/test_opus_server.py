"""The loopback OPUS API answers as the real one does: its field set and types (checked against
the recorded answers in fixtures/), ``latest`` only on a corpus's newest release, the
``preprocessing`` filter, exact case-sensitive codes, and the ``languages`` list."""

from __future__ import annotations

import json
from pathlib import Path

import requests

from tests.ops.opus_server import ENTRY_FIELDS, OpusServer, build_moses_zip

FIXTURE = Path(__file__).parent / "fixtures" / "opusapi_opensubtitles_en_zh.json"


def recorded() -> list[dict]:
    return json.loads(FIXTURE.read_text(encoding="utf-8"))["answers"]


def ask(server: OpusServer, query: str) -> dict:
    response = requests.get(server.api_url + query, timeout=10)
    response.raise_for_status()
    return response.json()


def publish_opensubtitles_zh(server: OpusServer) -> None:
    """OpenSubtitles as OPUS has it: v2018 spells Simplified Chinese zh_cn, v2024 zh_CN."""
    for version, code, n in (("v2018", "zh_cn", 3), ("v2024", "zh_CN", 5)):
        english = [f"line {i} of {version}" for i in range(n)]
        chinese = [f"第 {i} 行" for i in range(n)]
        data = build_moses_zip("OpenSubtitles", "en", code, english, chinese)
        server.add_corpus("OpenSubtitles", version, "en", code, data)
    for lang in ("de", "fr"):
        data = build_moses_zip("OpenSubtitles", "en", lang, ["a b"], ["c d"])
        server.add_corpus("OpenSubtitles", "v2024", "en", lang, data)


def test_the_fixture_is_in_the_documented_format() -> None:
    answers = recorded()
    entries = [e for a in answers for e in a["response"].get("corpora", [])]
    assert entries and all(tuple(entry) == ENTRY_FIELDS for entry in entries)
    assert {e["latest"] for e in entries} == {"True", "False"}


def test_answers_have_the_real_field_set_types_and_sizes_in_kb(opus_server: OpusServer) -> None:
    publish_opensubtitles_zh(opus_server)
    for answer in recorded():
        served = ask(opus_server, answer["request"])
        assert set(served) == set(answer["response"])
        for key, expected in answer["response"].items():
            if key == "languages":
                assert served[key] and all(isinstance(code, str) for code in served[key])
                continue
            assert len(served[key]) == len(expected), answer["request"]
            for mine, real in zip(served[key], expected, strict=True):
                assert tuple(mine) == tuple(real)
                assert {k: type(v) for k, v in mine.items()} == {
                    k: type(v) for k, v in real.items()
                }
                assert (mine["latest"], mine["source"], mine["target"], mine["version"]) == (
                    real["latest"],
                    real["source"],
                    real["target"],
                    real["version"],
                )
    [entry] = ask(opus_server, "?source=en&target=zh_CN&corpus=OpenSubtitles&version=v2024&preprocessing=moses")["corpora"]  # fmt: skip
    zip_bytes = opus_server.files["/OPUS-OpenSubtitles/v2024/moses/en-zh_CN.txt.zip"]
    assert entry["size"] == len(zip_bytes) // 1024
    assert (entry["alignment_pairs"], entry["documents"]) == (5, "")


def test_latest_is_only_the_newest_release_of_the_corpus(opus_server: OpusServer) -> None:
    publish_opensubtitles_zh(opus_server)
    query = "?source=en&target={}&corpus=OpenSubtitles&version={}&preprocessing=moses"
    latest_cn = ask(opus_server, query.format("zh_CN", "latest"))["corpora"]
    assert [(e["version"], e["latest"]) for e in latest_cn] == [("v2024", "True")]
    # v2018 is not the corpus's newest release, so 'latest' finds nothing for zh_cn
    assert ask(opus_server, query.format("zh_cn", "latest"))["corpora"] == []
    pinned = ask(opus_server, query.format("zh_cn", "v2018"))["corpora"]
    assert [(e["version"], e["latest"]) for e in pinned] == [("v2018", "False")]
    # codes are compared exactly, case and all; source and target are sorted
    assert ask(opus_server, query.format("zh_cn", "v2024"))["corpora"] == []
    swapped = "?source=zh_CN&target=en&corpus=OpenSubtitles&version=latest&preprocessing=moses"
    assert ask(opus_server, swapped)["corpora"] == latest_cn
    opus_server.latest_release["OpenSubtitles"] = "v2018"
    assert len(ask(opus_server, query.format("zh_cn", "latest"))["corpora"]) == 1


def test_preprocessing_is_a_filter(opus_server: OpusServer) -> None:
    publish_opensubtitles_zh(opus_server)
    query = "?source=en&target=zh_CN&corpus=OpenSubtitles&version=v2024"
    every = ask(opus_server, query)["corpora"]
    assert sorted(e["preprocessing"] for e in every) == ["moses", "tmx", "xml"]
    for preprocessing in ("moses", "tmx", "xml"):
        [entry] = ask(opus_server, f"{query}&preprocessing={preprocessing}")["corpora"]
        assert entry["preprocessing"] == preprocessing
        assert f"/{preprocessing}/en-zh_CN." in entry["url"]
    assert ask(opus_server, f"{query}&preprocessing=parsed")["corpora"] == []
    # a parameter the API does not know is ignored, not matched
    assert ask(opus_server, f"{query}&preprocessing=moses&foo=1")["corpora"] != []


def test_languages_lists_the_codes_paired_with_english(opus_server: OpusServer) -> None:
    publish_opensubtitles_zh(opus_server)
    query = "?languages=True&corpus=OpenSubtitles&source=en&preprocessing=moses&version={}"
    assert ask(opus_server, query.format("latest"))["languages"] == ["de", "fr", "zh_CN"]
    assert ask(opus_server, query.format("v2018"))["languages"] == ["zh_cn"]
    assert ask(opus_server, "?corpora=True&source=en&target=de")["corpora"] == ["OpenSubtitles"]
