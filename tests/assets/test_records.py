"""Stage records read from manifest.json as dataclasses, the JSON left as it was."""

from __future__ import annotations

import json
from pathlib import Path

from assets.framework.records import (
    DeduplicatedRecord,
    PairCounts,
    SentencepieceRecord,
    read_record,
)
from assets.framework.stage import Stage
from assets.settings.resources import StorageResource


def test_a_record_reads_by_attribute_and_keeps_unknown_keys(tmp_path: Path) -> None:
    stage = Stage(StorageResource(root=str(tmp_path)), "de", "deduplicated_pairs")
    stage.path("pairs.parquet").write_bytes(b"")
    written = {
        "stage": "dedup",
        "n_in": 10,
        "n_out": 7,
        "dropped": {"duplicate": 3},
        "seconds": 0.5,
        "caps": {"corpora": {}},
        "held_back": {"n_out": 7},
        "a_later_field": [1, 2],
    }
    manifest = stage.commit("fp", {"pairs": "pairs.parquet"}, written)
    record = read_record(manifest, DeduplicatedRecord)
    assert (record.n_in, record.n_out, record.dropped, record.seconds) == (
        10,
        7,
        written["dropped"],
        0.5,
    )
    assert record.caps == {"corpora": {}} and record.segmentation is None
    assert record.extra == {"stage": "dedup", "a_later_field": [1, 2]}
    assert record.as_dict() == written  # the shape on disk, unknown keys included
    on_disk = json.loads(stage.path("manifest.json").read_text())["record"]
    assert on_disk == written


def test_an_older_record_without_later_fields_still_reads() -> None:
    # written before the dev suite's pairs were held back: no held_back, no seconds
    older = PairCounts.from_dict({"n_in": 4, "n_out": 4})
    assert (older.dropped, older.seconds, older.pass_rate) == ({}, 0.0, 1.0)
    assert DeduplicatedRecord.from_dict({"n_in": 0, "n_out": 0}).held_back is None
    assert PairCounts.from_dict({"n_in": 0, "n_out": 0}).pass_rate == 0.0
    spm = SentencepieceRecord.from_dict(
        {"settings": {"vocab_size": 500}, "vocab_size": 512, "sha256": "ab"}
    )
    assert (spm.requested_vocab_size, spm.vocab_size, spm.seconds) == (500, 512, 0.0)


def test_a_model_record_made_by_the_stage_is_written_as_it_is_read() -> None:
    """psp_model builds its record as a ModelRecord: the manifest keeps the shape it always had
    (every field, None ones included, but the version the plan adds later), and reading it back
    gives the same record."""
    from assets.framework.records import ModelRecord

    made = ModelRecord(
        history=[{"epoch": 0, "loss": 0.5}], steps=10, dim=8, vocab_size=100,
        settings={"lr": 0.05}, settings_from={"lr": "profile demo"}, seconds=1.5,
    )  # fmt: skip
    written = made.as_dict()
    assert set(written) == {
        "history", "steps", "best_epoch", "best_dev_score", "best_epoch_unavailable",
        "dev_sts", "model_selection", "dim", "vocab_size", "settings", "settings_from",
        "seconds", "training_window", "loss_curve",
    }  # fmt: skip
    assert written["best_epoch"] is None and "version" not in written
    read = ModelRecord.from_dict(json.loads(json.dumps(written | {"version": "v3"})))
    assert read.as_dict() == written | {"version": "v3"}
    assert (read.steps, read.settings_from, read.version) == (10, {"lr": "profile demo"}, "v3")


def test_a_retrain_plan_reads_typed_from_either_mode() -> None:
    from assets.framework.records import RetrainPlanRecord

    incremental = RetrainPlanRecord.from_dict(
        {"upstream": "fp", "candidate": "v2", "setting": "auto", "mode": "incremental",
         "parent": "v2", "rule": "incremental", "reason": "new pairs", "new_pairs": 5,
         "replay_pairs": 5, "lineage_pairs": 20, "seen_pairs": 10, "seconds": 0.1}
    )  # fmt: skip
    assert incremental.incremental and incremental.parent == "v2"
    assert incremental.new_pairs + incremental.replay_pairs == 10
    full = RetrainPlanRecord.from_dict({"mode": "full", "parent": None, "reason": "first"})
    assert not full.incremental and full.init_from is None and full.vocabulary_fit is None
