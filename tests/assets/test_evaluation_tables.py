"""The evaluation's speed table says what each figure measures and in which unit, rounded as
people read it."""

from __future__ import annotations

from assets.lifecycle.evaluation_tables import evaluation_tables


def test_the_speed_table_names_its_units() -> None:
    speed = {
        "sentences": 20216,
        "batch_size": 256,
        "repeats": 3,
        "torch_threads": 1,
        "with_tokenization": 3706.9810247700025,
        "without_tokenization": 221100.4,
    }
    table = evaluation_tables({"speed": speed})["speed"].value
    assert [column.name for column in table.schema.columns] == ["measure", "value", "unit"]
    rows = {row.data["measure"]: (row.data["value"], row.data["unit"]) for row in table.records}
    assert rows["embed, tokenization included"] == (3707.0, "sentences/s")
    assert rows["embed pre-tokenized ids"] == (221100.0, "sentences/s")
    assert rows["repeats (the best is shown)"] == (3.0, "runs")
    assert len(rows) == len(speed)
