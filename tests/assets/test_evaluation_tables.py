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


def test_the_sts_tables_carry_the_papers_figures_beside_ours() -> None:
    """As results.md does: each year's mean and each STS 2017 track the paper reports, beside
    the model's; none beside a figure the paper has no counterpart for (one dataset, a mean
    over fewer years, the dev track)."""
    c = {"n": 250, "pearson": 70.04, "spearman": 69.2}
    summary = {
        "sts": {
            "datasets": {"2012": {"MSRpar": c}},
            "years": {"2012": c},
            "mean": c,
            "mean_over_years": ["2012"],
        },
        "sts17": {"ar-ar": c, "en-en": c},
        "dev_sts": "sts17/en-en.tsv",
    }
    tables = evaluation_tables(summary)
    for name in ("sts", "sts17"):
        assert [column.name for column in tables[name].value.schema.columns][-1] == "paper"
    sts = {row.data["set"].strip(): row.data["paper"] for row in tables["sts"].value.records}
    assert sts == {"STS 2012 (mean)": 68.7, "2012 MSRpar": None, "mean 2012": None}
    sts17 = {row.data["set"]: row.data["paper"] for row in tables["sts17"].value.records}
    assert sts17 == {"ar-ar": 76.2, "en-en": None}
