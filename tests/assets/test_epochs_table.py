"""The epochs table of psp_model's metadata: epochs counted from 1, rounded, and no dev-score
column for a training without model selection (it was an empty column)."""

from __future__ import annotations

from assets.metadata import epochs_table


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
