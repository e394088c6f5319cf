"""raw_pairs fails at once, with its message, on errors a retry cannot fix (a 404, a language not
in the registry, a bad run config, a corrupt zip), and Dagster retries the network's failures."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from dagster import DagsterEventType, materialize

from assets.settings.resources import ParaNmtResource
from pipelines.definitions import defs
from tests.ops.opus_server import Fault, OpusServer, build_moses_zip
from tests.pipelines.conftest import loopback_resources
from tests.pipelines.corpora import DE_EN_REGISTRY, publish_de
from tests.pipelines.isolated import materialize_raw_pairs_isolated

TANZIL_ZIP = "/OPUS-Tanzil/v1/moses/de-en.txt.zip"


def materialize_raw_pairs(server: OpusServer, tmp_path: Path, partition: str, **kwargs):
    resources = loopback_resources(server, tmp_path / "storage", tmp_path / "eval")
    return materialize(
        [defs.get_assets_def("raw_pairs")],
        partition_key=partition,
        resources=resources,
        raise_on_error=False,
        **kwargs,
    )


def retries_and_failure(result) -> tuple[int, str]:
    """(STEP_UP_FOR_RETRY events, the step failure's message)."""
    events = result.all_events
    retries = sum(1 for e in events if e.event_type == DagsterEventType.STEP_UP_FOR_RETRY)
    failures = [e for e in events if e.event_type == DagsterEventType.STEP_FAILURE]
    assert len(failures) == 1
    return retries, failures[0].step_failure_data.error.message


def test_a_404_fails_at_once_with_its_message(opus_server: OpusServer, tmp_path: Path) -> None:
    publish_de(opus_server, build_moses_zip)
    opus_server.fail(TANZIL_ZIP, Fault(status=404, times=99))
    start = time.monotonic()
    result = materialize_raw_pairs(opus_server, tmp_path, "de")
    elapsed = time.monotonic() - start
    assert not result.success
    retries, message = retries_and_failure(result)
    assert retries == 0
    assert "corpus 'Tanzil' v1 for en-de" in message and "HTTP 404" in message
    assert opus_server.count(TANZIL_ZIP) == 1
    assert elapsed < 20


@pytest.mark.parametrize(
    ("setup", "run_config", "expected"),
    [
        (
            lambda s: s.fail(publish_de_path(s), Fault(truncate_to=200, times=99)),
            None,
            "is not a complete zip",
        ),
        (
            lambda s: publish_de(s, build_moses_zip),
            {"ops": {"raw_pairs": {"config": {"opus_versions": {"Europarl": "v8"}}}}},
            "opus_versions names ['Europarl'], which are not corpora of 'de'",
        ),
        (
            lambda s: publish_de(s, build_moses_zip),
            {"ops": {"raw_pairs": {"config": {"opus_versions": {"Tanzil": "v9"}}}}},
            "corpus 'Tanzil' v9 for en-de: the OPUS API answer",
        ),
    ],
    ids=["truncated-zip", "unknown-corpus-in-config", "version-not-published"],
)
def test_errors_a_retry_cannot_fix_are_not_retried(
    opus_server: OpusServer, tmp_path: Path, setup, run_config, expected: str
) -> None:
    setup(opus_server)
    result = materialize_raw_pairs(opus_server, tmp_path, "de", run_config=run_config)
    retries, message = retries_and_failure(result)
    assert retries == 0
    assert expected in message


def publish_de_path(server: OpusServer) -> str:
    publish_de(server, build_moses_zip)
    return TANZIL_ZIP


def test_a_language_not_in_the_registry_fails_at_once(
    opus_server: OpusServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    registry = tmp_path / "languages.toml"
    registry.write_text('[languages.de]\nsource = "paranmt"\n')
    monkeypatch.setenv("PSP_LANGUAGES", str(registry))
    result = materialize_raw_pairs(opus_server, tmp_path, "fr")
    retries, message = retries_and_failure(result)
    assert retries == 0
    assert f"language 'fr' is not in the registry {registry}" in message


@pytest.mark.slow
def test_server_errors_are_retried_by_dagster_until_the_download_succeeds(
    opus_server: OpusServer, tmp_path: Path
) -> None:
    n_pairs = publish_de(opus_server, build_moses_zip)
    # two 500s exhaust one attempt's request retries (retries=1); the stage's retry succeeds
    opus_server.fail(TANZIL_ZIP, Fault(status=500, times=2))
    answer = materialize_raw_pairs_isolated(
        opus_server, tmp_path / "storage", "de", PSP_DOWNLOAD_RETRY_DELAY="0.1"
    )
    run = answer["runs"]["de"]
    assert run["success"], run["failures"]
    assert run["events"].count("STEP_UP_FOR_RETRY") == 1
    assert opus_server.count(TANZIL_ZIP) == 3
    manifest = json.loads((tmp_path / "storage" / "de" / "raw_pairs" / "manifest.json").read_text())
    assert manifest["record"]["n_in"] == n_pairs


DEAD_PARANMT_URL = "http://phontron.com/data/para-nmt-50m.zip"


@pytest.mark.parametrize(
    "url",
    [None, DEAD_PARANMT_URL, "{tmp}/para-nmt-50m.zip", "file://{tmp}/para-nmt-5m-processed.txt"],
    ids=["unset", "dead-url", "missing-path", "missing-file-url"],
)
def test_paranmt_without_a_file_stops_before_any_work_with_one_line_on_what_to_do(
    opus_server: OpusServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, url: str | None
) -> None:
    registry = tmp_path / "languages.toml"
    registry.write_text(DE_EN_REGISTRY)
    monkeypatch.setenv("PSP_LANGUAGES", str(registry))
    publish_de(opus_server, build_moses_zip)
    resources = loopback_resources(opus_server, tmp_path / "storage", tmp_path / "eval")
    url = url.format(tmp=tmp_path) if url else None
    resources["paranmt"] = ParaNmtResource(url=url, retries=1, backoff=0.01)
    inbox = tmp_path / "storage" / "inbox" / "en"
    inbox.mkdir(parents=True)
    (inbox / "more.txt").write_text("a b c d e\tf g h i j\t0.9\n")
    result = materialize(
        [defs.get_assets_def("raw_pairs")],
        partition_key="en",
        resources=resources,
        raise_on_error=False,
    )
    retries, message = retries_and_failure(result)
    assert retries == 0
    [failure] = [e for e in result.all_events if e.event_type == DagsterEventType.STEP_FAILURE]
    description = failure.step_failure_data.user_failure_data.description
    assert "\n" not in description and description in message
    assert "PSP_PARANMT_URL" in description and "docs/corpus.md" in description
    assert opus_server.count() == 0  # nothing downloaded, not even the API asked
    assert sorted(p.name for p in (tmp_path / "storage").iterdir()) == ["inbox"]  # nothing written


def test_a_paranmt_url_that_fails_says_what_to_do(
    opus_server: OpusServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    registry = tmp_path / "languages.toml"
    registry.write_text(DE_EN_REGISTRY)
    monkeypatch.setenv("PSP_LANGUAGES", str(registry))
    result = materialize_raw_pairs(opus_server, tmp_path, "en")  # the URL answers 404
    retries, message = retries_and_failure(result)
    assert retries == 0
    assert "HTTP 404" in message and "PSP_PARANMT_URL" in message
