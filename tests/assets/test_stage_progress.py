"""The long data stages report progress in the run's event log: language ID, the filters,
dedup and the encoding each log ``<stage>: done / total pairs (share), rate, eta`` lines (every
30 s on real data; every batch here, with the rhythm set to 0)."""

from __future__ import annotations

import re

import pytest
from dagster import DagsterInstance, materialize

import ops.progress
from pipelines.definitions import defs
from tests.ops.opus_server import OpusServer, build_moses_zip
from tests.pipelines.conftest import loopback_resources
from tests.pipelines.corpora import publish_de

STAGES = (
    "raw_pairs",
    "langid_filtered_pairs",
    "length_filtered_pairs",
    "deduplicated_pairs",
    "sentencepiece_model",
    "training_data",
)


def test_data_stages_log_their_progress_in_the_run(tmp_path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr(ops.progress, "DEFAULT_SECONDS", 0.0)
    server = OpusServer().start()
    try:
        publish_de(server, build_moses_zip)
        resources = loopback_resources(server, tmp_path / "storage", tmp_path / "eval")
        instance = DagsterInstance.ephemeral()
        result = materialize(
            [defs.get_assets_def(name) for name in STAGES],
            partition_key="de",
            resources=resources,
            run_config={"ops": {"sentencepiece_model": {"config": {"vocab_size": 300}}}},
            instance=instance,
        )
    finally:
        server.stop()
    assert result.success
    lines = [
        entry.user_message
        for entry in instance.all_logs(result.run_id)
        if entry.dagster_event is None
    ]
    line = r"ops\.\w+: {}: [\d,]+ / [\d,]+ pairs \(\d+%\), [\d,]+ pairs/s, eta \S+"
    for stage in ("language ID", "bitext filters", "dedup", "encode and pack"):
        assert any(re.search(line.format(stage), text) for text in lines), (stage, lines)
