"""new_bitext_sensor and weekly_retrain_schedule, evaluated with Dagster's testing APIs against
a loopback OPUS API and a temporary inbox."""

from __future__ import annotations

import json
import os
from datetime import UTC, datetime
from pathlib import Path

import pytest
from dagster import SensorResult, build_schedule_context, build_sensor_context

from assets.settings.languages import load_registry
from assets.settings.resources import OpusResource, StorageResource, version_key
from pipelines.schedules import weekly_retrain_schedule
from pipelines.sensors import new_bitext_sensor
from tests.ops.opus_server import OpusServer, build_moses_zip

#: the run config of automatic retraining runs (PSP_RETRAIN_PROFILE unset)
PAPER = {"resources": {"profile": {"config": {"name": "paper"}}}}


def publish(server: OpusServer, corpus: str, version: str, code: str) -> None:
    data = build_moses_zip(corpus, "en", code, ["one", "two"], ["eins", "zwei"])
    server.add_corpus(corpus, version, "en", code, data)


def tick(server: OpusServer, root: Path, cursor: str | None) -> SensorResult:
    resources = {
        "storage": StorageResource(root=str(root)),
        "opus": OpusResource(api_base=server.api_url, retries=0, timeout=5),
    }
    context = build_sensor_context(cursor=cursor, resources=resources)
    result = new_bitext_sensor(context)
    assert isinstance(result, SensorResult)
    return result


def drop_bitext(root: Path, lang: str, name: str, lines: int = 3) -> None:
    inbox = root / "inbox" / lang
    inbox.mkdir(parents=True, exist_ok=True)
    (inbox / f"{name}.en").write_text("".join(f"english {i}\n" for i in range(lines)))
    (inbox / f"{name}.{lang}").write_text("".join(f"other {i}\n" for i in range(lines)))


@pytest.mark.parametrize(
    ("older", "newer"),
    [("v1", "v2"), ("v2", "v10"), ("v2017q3", "v2018"), ("v2018", "v2024"), ("v8", "v8.1")],
)
def test_version_order(older: str, newer: str) -> None:
    assert version_key(older) < version_key(newer)


def test_nothing_new_skips_and_a_configured_version_is_not_news(
    opus_server: OpusServer, tmp_path: Path
) -> None:
    publish(opus_server, "Tanzil", "v1", "de")  # exactly what the registry pins
    result = tick(opus_server, tmp_path, None)
    assert result.run_requests == []
    assert result.skip_reason is not None


def test_newer_opus_release_runs_only_that_language_once(
    opus_server: OpusServer, tmp_path: Path
) -> None:
    publish(opus_server, "Tanzil", "v1", "de")
    publish(opus_server, "Tanzil", "v2", "de")
    publish(opus_server, "OpenSubtitles", "v2018", "zh_cn")  # zh's pinned version: no news
    first = tick(opus_server, tmp_path, None)
    assert [r.partition_key for r in first.run_requests] == ["de"]
    request = first.run_requests[0]
    assert request.run_config == PAPER | {
        "ops": {"raw_pairs": {"config": {"opus_versions": {"Tanzil": "v2"}}}}
    }
    assert "Tanzil v2" in request.tags["psp/trigger"]
    assert json.loads(first.cursor)["opus"]["de"] == {"Tanzil": "v2"}

    again = tick(opus_server, tmp_path, first.cursor)
    assert again.run_requests == []  # the cursor remembers: no second run

    publish(opus_server, "Tanzil", "v3", "de")
    third = tick(opus_server, tmp_path, again.cursor)
    assert [r.partition_key for r in third.run_requests] == ["de"]
    assert third.run_requests[0].run_config["ops"]["raw_pairs"]["config"]["opus_versions"] == {
        "Tanzil": "v3"
    }
    assert third.run_requests[0].run_key != request.run_key


def test_inbox_files_run_their_language_and_keep_newer_releases(
    opus_server: OpusServer, tmp_path: Path
) -> None:
    publish(opus_server, "Tanzil", "v2", "de")
    first = tick(opus_server, tmp_path, None)
    assert [r.partition_key for r in first.run_requests] == ["de"]

    drop_bitext(tmp_path, "fr", "news")
    drop_bitext(tmp_path, "de", "talks")
    second = tick(opus_server, tmp_path, first.cursor)
    requests = {r.partition_key: r for r in second.run_requests}
    assert sorted(requests) == ["de", "fr"]
    assert "inbox" in requests["fr"].tags["psp/trigger"]
    assert requests["fr"].run_config == PAPER  # automatic retraining: the paper's settings
    # de's inbox run keeps the newer Tanzil release the sensor already acted on
    assert requests["de"].run_config["ops"]["raw_pairs"]["config"]["opus_versions"] == {
        "Tanzil": "v2"
    }

    assert tick(opus_server, tmp_path, second.cursor).run_requests == []
    extra = tmp_path / "inbox" / "fr" / "news.fr"
    extra.write_text(extra.read_text() + "other 3\n")
    os.utime(extra, ns=(1, 1))
    (tmp_path / "inbox" / "fr" / "news.en").write_text("".join(f"e {i}\n" for i in range(4)))
    changed = tick(opus_server, tmp_path, second.cursor)
    assert [r.partition_key for r in changed.run_requests] == ["fr"]


def test_unreachable_opus_api_still_checks_the_inbox(tmp_path: Path) -> None:
    drop_bitext(tmp_path, "tr", "web")
    resources = {
        "storage": StorageResource(root=str(tmp_path)),
        "opus": OpusResource(api_base="http://127.0.0.1:9/opusapi/", retries=0, timeout=2),
    }
    result = new_bitext_sensor(build_sensor_context(resources=resources))
    assert [r.partition_key for r in result.run_requests] == ["tr"]
    assert json.loads(result.cursor)["opus"]["de"] == {}


def test_hidden_and_partial_files_are_not_news(opus_server: OpusServer, tmp_path: Path) -> None:
    inbox = tmp_path / "inbox" / "es"
    inbox.mkdir(parents=True)
    (inbox / ".news.en.swp").write_text("editing")
    assert tick(opus_server, tmp_path, None).run_requests == []


def test_schedule_requests_every_language_once_per_tick() -> None:
    when = datetime(2024, 5, 6, 3, 0, tzinfo=UTC)
    requests = list(weekly_retrain_schedule(build_schedule_context(scheduled_execution_time=when)))
    assert [r.partition_key for r in requests] == load_registry().codes
    assert len({r.run_key for r in requests}) == len(requests)
    assert all(r.run_key.endswith("2024-05-06T03:00") for r in requests)
    assert weekly_retrain_schedule.cron_schedule == "0 3 * * 1"


def test_each_scheduled_request_says_its_language_and_profile(monkeypatch) -> None:
    """The schedule's preview in the UI lists one row per request: each names its language and
    the profile it trains with, and the schedule's description names the profile too."""
    monkeypatch.setenv("PSP_RETRAIN_PROFILE", "smoke")
    when = datetime(2024, 5, 6, 3, 0, tzinfo=UTC)
    requests = list(weekly_retrain_schedule(build_schedule_context(scheduled_execution_time=when)))
    assert [r.tags["psp/language"] for r in requests] == load_registry().codes
    assert {r.tags["psp/profile"] for r in requests} == {"smoke"}
    assert "PSP_RETRAIN_PROFILE" in weekly_retrain_schedule.description
    assert "profile" in weekly_retrain_schedule.description


def test_a_newer_release_that_spells_the_code_differently_is_news(
    opus_server: OpusServer, tmp_path: Path
) -> None:
    """OpenSubtitles v2024 names Simplified Chinese zh_CN where the registry (pinned to v2018)
    says zh_cn; the API marks only v2024 latest."""
    publish(opus_server, "OpenSubtitles", "v2018", "zh_cn")
    publish(opus_server, "OpenSubtitles", "v2024", "zh_CN")
    result = tick(opus_server, tmp_path, None)
    assert [r.partition_key for r in result.run_requests] == ["zh"]
    overrides = result.run_requests[0].run_config["ops"]["raw_pairs"]["config"]["opus_versions"]
    assert overrides == {"OpenSubtitles": "v2024"}


def test_the_sensors_say_what_they_start_and_with_which_profile() -> None:
    """What the UI shows of each sensor: what it runs and, for the bitext sensor, the profile
    of its runs (as the schedule's says), never the names of the code behind it."""
    from pipelines.definitions import scoreboard_automation

    assert "PSP_RETRAIN_PROFILE" in new_bitext_sensor.description
    assert "profile" in new_bitext_sensor.description
    assert "scoreboard" in (scoreboard_automation.description or "")
    for described in (new_bitext_sensor, scoreboard_automation, weekly_retrain_schedule):
        assert (
            "psp_core." not in described.description and "(resources:" not in described.description
        )
