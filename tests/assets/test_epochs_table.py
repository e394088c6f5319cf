"""The epochs table of psp_model's metadata: epochs counted from 1, rounded, and no dev-score
column for a training without model selection (it was an empty column)."""

from __future__ import annotations

from assets.framework.metadata import epochs_table


def history(dev: bool) -> list[dict]:
    return [
        {
            "epoch": e,
            "steps": 10 * (e + 1),
            "loss": 0.123456,
            "pairs_per_second": 2631.4,
            "dev_score": 80.12345 + e if dev else None,
        }
        for e in range(3)
    ]


def test_with_model_selection_the_dev_score_is_a_column() -> None:
    table = epochs_table(history(dev=True)).value
    assert [c.name for c in table.schema.columns][-1] == "dev_score"
    assert [r.data["epoch"] for r in table.records] == [1, 2, 3]
    assert (
        table.records[0].data["dev_score"] == 80.12 and table.records[0].data["mean_loss"] == 0.1235
    )


def test_without_model_selection_there_is_no_empty_dev_column() -> None:
    table = epochs_table(history(dev=False)).value
    assert "dev_score" not in [c.name for c in table.schema.columns]
    assert all("dev_score" not in r.data for r in table.records)


def test_a_best_epoch_found_damaged_is_shown_beside_the_epoch_kept() -> None:
    """When the kept epoch's table was damaged before the bundle was written, the bundle holds
    the final epoch's weights and psp_model's metadata says why; otherwise there is no entry."""
    from assets.framework.records import ModelRecord
    from assets.stages.psp_model import training_metadata

    common = dict(history=history(dev=True), steps=30, best_epoch=0, best_dev_score=80.1)
    common.update(dim=8, vocab_size=100, seconds=1.0)
    reason = "/c/best.safetensors: 10 bytes ... when it was written (damaged or changed since)"
    damaged = training_metadata(ModelRecord(**common, best_epoch_unavailable=reason))
    assert damaged["best_epoch_unavailable"].value == reason
    assert "best_epoch_unavailable" not in training_metadata(ModelRecord(**common))


def test_the_best_dev_score_says_its_set_scale_and_direction() -> None:
    from assets.framework.records import ModelRecord
    from assets.stages.psp_model import DEV_SUITE_SELECTION, training_metadata

    common = dict(history=history(dev=True), steps=30, best_epoch=0, best_dev_score=80.1)
    common.update(dim=8, vocab_size=100, seconds=1.0)
    suite = training_metadata(ModelRecord(**common, model_selection=DEV_SUITE_SELECTION))
    assert "dev suite" in suite["best_dev_score_is"].value
    assert "higher is better" in suite["best_dev_score_is"].value
    sts = training_metadata(ModelRecord(**common, model_selection="sts17/STS.en-en.txt"))
    assert sts["best_dev_score_is"].value == (
        "Pearson x 100 on sts17/STS.en-en.txt, higher is better"
    )
    assert "best_dev_score_is" not in training_metadata(
        ModelRecord(**{**common, "best_dev_score": None})
    )
