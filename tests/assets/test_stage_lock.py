"""Two runs of one stage at once take turns: the stage is computed once, and the second run
reuses it (two concurrent runs of a language once trained its sentencepiece model twice)."""

from __future__ import annotations

import threading
import time
from pathlib import Path

from assets.framework.stage import LOCK, Stage
from assets.settings.resources import StorageResource


def test_concurrent_runs_of_a_stage_compute_it_once(tmp_path: Path) -> None:
    storage = StorageResource(root=str(tmp_path))
    calls: list[float] = []

    def compute() -> tuple[dict, dict]:
        calls.append(time.monotonic())
        time.sleep(0.5)
        stage = Stage(storage, "de", "sentencepiece_model")
        stage.path("model.bin").write_bytes(b"model %d" % len(calls))
        return {"model": "model.bin"}, {"calls": len(calls)}

    manifests = []

    def run() -> None:
        # each run holds its own Stage, as two Dagster runs would
        manifests.append(Stage(storage, "de", "sentencepiece_model").run("fp", compute))

    threads = [threading.Thread(target=run) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    assert len(calls) == 1
    assert sorted(m.reused for m in manifests) == [False, True]
    assert {m.record["calls"] for m in manifests} == {1}
    directory = tmp_path / "de" / "sentencepiece_model"
    assert sorted(p.name for p in directory.iterdir()) == ["manifest.json", "model.bin"]
    assert not (directory / LOCK).exists()
