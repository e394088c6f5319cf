"""raw_pairs reads the sources as they are: a two-column ParaNMT file named by a file:// URL
(its pairs unscored, the score filter skipped for them and both counted in the stages'
metadata), and OpenSubtitles' Chinese under the code each release spells it with (recorded)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from dagster import TableMetadataValue, materialize

from assets.settings.resources import ParaNmtResource
from pipelines.definitions import defs
from tests.ops.opus_server import OpusServer, build_moses_zip
from tests.pipelines.conftest import loopback_resources
from tests.pipelines.corpora import english_chinese, paranmt_lines


def metadata_of(result, name: str) -> dict:
    [event] = result.asset_materializations_for_node(name)
    return {
        key: [r.data for r in value.records] if isinstance(value, TableMetadataValue) else value
        for key, value in event.metadata.items()
    }


def plain(metadata: dict) -> dict:
    return {k: getattr(v, "value", v) for k, v in metadata.items()}


def test_a_two_column_paranmt_file_from_a_file_url(
    opus_server: OpusServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    registry = tmp_path / "languages.toml"
    registry.write_text('[languages.en]\nsource = "paranmt"\n')
    monkeypatch.setenv("PSP_LANGUAGES", str(registry))
    source = tmp_path / "para nmt" / "para-nmt-5m-processed.txt"
    source.parent.mkdir()
    lines = [line.rsplit("\t", 1)[0] for line in paranmt_lines(300, seed=4)]
    source.write_text("".join(f"{line}\n" for line in lines))
    resources = loopback_resources(opus_server, tmp_path / "storage", tmp_path / "eval")
    resources["paranmt"] = ParaNmtResource(url=source.as_uri())
    stages = ["raw_pairs", "langid_filtered_pairs", "length_filtered_pairs", "deduplicated_pairs"]
    result = materialize(
        [defs.get_assets_def(name) for name in stages], partition_key="en", resources=resources
    )
    assert result.success
    raw = plain(metadata_of(result, "raw_pairs"))
    assert raw["pairs_out"] == 300 and raw["pairs_unscored"] == 300
    assert {"pairs": "of out: unscored", "count": 300} in [
        {k: row[k] for k in ("pairs", "count")} for row in raw["funnel"]
    ]
    assert [row["name"] for row in raw["sources"]] == [str(source)]  # the path, not the URL
    filtered = plain(metadata_of(result, "length_filtered_pairs"))
    funnel = {row["pairs"]: row["count"] for row in filtered["funnel"]}
    assert not [name for name in funnel if "score" in name and name.startswith("dropped")]
    assert funnel["of out: score_filter_skipped"] == filtered["pairs_out"] > 0
    assert filtered["pairs_score_filter_skipped"] == filtered["pairs_out"]
    manifest = tmp_path / "storage" / "en" / "length_filtered_pairs" / "manifest.json"
    record = json.loads(manifest.read_text())["record"]
    assert record["notes"] == {"score_filter_skipped": filtered["pairs_out"]}


@pytest.mark.parametrize("version", ["latest", "v2024", "v2018"])
def test_the_code_each_opensubtitles_release_uses_is_found_and_recorded(
    opus_server: OpusServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, version: str
) -> None:
    registry = tmp_path / "languages.toml"
    registry.write_text(
        '[languages.zh]\nsource = "opus"\ncorpora = [{ name = "OpenSubtitles", '
        f'version = "{version}", codes = {{ zh = "zh_cn" }} }}]\n'
    )
    monkeypatch.setenv("PSP_LANGUAGES", str(registry))
    for release, code, n in (("v2018", "zh_cn", 20), ("v2024", "zh_CN", 30)):
        english, chinese = english_chinese(n, seed=n)
        data = build_moses_zip("OpenSubtitles", "en", code, english, chinese)
        opus_server.add_corpus("OpenSubtitles", release, "en", code, data)
    resources = loopback_resources(opus_server, tmp_path / "storage", tmp_path / "eval")
    result = materialize(
        [defs.get_assets_def("raw_pairs")], partition_key="zh", resources=resources
    )
    assert result.success
    release, code, n = ("v2018", "zh_cn", 20) if version == "v2018" else ("v2024", "zh_CN", 30)
    raw = plain(metadata_of(result, "raw_pairs"))
    assert raw["pairs_out"] == n
    assert [(row["source"], row["release"]) for row in raw["per_source"]] == [
        ("OpenSubtitles", f"{release} en-{code}")
    ]
    manifest = tmp_path / "storage" / "zh" / "raw_pairs" / "manifest.json"
    [part] = json.loads(manifest.read_text())["record"]["parts"]
    assert (
        part["corpora"]["OpenSubtitles"] | {"version": release, "opus_code": code}
        == (part["corpora"]["OpenSubtitles"])
    )
