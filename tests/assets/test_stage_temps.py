"""A stage removes the temporary files a killed run of it left in its directory when it starts,
whether it then recomputes or reuses its output, and keeps those of live processes."""

from __future__ import annotations

from pathlib import Path

import pytest
from dagster import materialize

from pipelines.definitions import defs
from tests.ops.opus_server import OpusServer
from tests.ops.temp_writers import killed_writer, live_writer
from tests.pipelines.conftest import loopback_resources
from tests.pipelines.corpora import english_german


def test_a_stage_removes_what_a_killed_run_left(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    bitext = tmp_path / "bitext"
    bitext.mkdir()
    english, german = english_german(40, seed=4)
    (bitext / "news.en").write_text("\n".join(english) + "\n")
    (bitext / "news.de").write_text("\n".join(german) + "\n")
    registry = tmp_path / "languages.toml"
    registry.write_text(f'[languages.de]\nsource = "local"\nlocal_dir = "{bitext}"\n')
    monkeypatch.setenv("PSP_LANGUAGES", str(registry))
    resources = loopback_resources(OpusServer(), tmp_path / "storage", tmp_path / "eval")
    raw_pairs = defs.get_assets_def("raw_pairs")
    stage = tmp_path / "storage" / "de" / "raw_pairs"
    first = killed_writer(stage, [".part-source.parquet.tmp-{pid}", ".manifest.json.tmp-{pid}"])

    with live_writer(stage, [".pairs.parquet.tmp-{pid}"]) as alive:
        result = materialize([raw_pairs], partition_key="de", resources=resources)
        assert result.success
        assert not (stage / f".part-source.parquet.tmp-{first}").exists()
        assert not (stage / f".manifest.json.tmp-{first}").exists()
        assert (stage / f".pairs.parquet.tmp-{alive}").exists()

        second = killed_writer(stage, ["model.tmp-{pid}/"])
        again = materialize([raw_pairs], partition_key="de", resources=resources)
        (event,) = again.asset_materializations_for_node("raw_pairs")
        assert event.metadata["reused"].value is True  # cleaned even when nothing is recomputed
        assert not (stage / f"model.tmp-{second}").exists()
        assert (stage / f".pairs.parquet.tmp-{alive}").exists()
    # the live writer has now been killed too: the next run removes its temporary
    assert (stage / f".pairs.parquet.tmp-{alive}").exists()
    assert materialize([raw_pairs], partition_key="de", resources=resources).success
    assert sorted(p.name for p in stage.iterdir()) == ["manifest.json", "pairs.parquet"]
