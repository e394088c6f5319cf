"""The evaluation's results as Dagster tables, shown inline on the materialization (markdown
longer than the UI's inline limit hides behind a "Show Markdown" click)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from dagster import MetadataValue, TableColumn, TableRecord, TableSchema


def _round(value: Any, digits: int = 1) -> float | None:
    return None if value is None else round(float(value), digits)


_CORRELATION_COLUMNS = [
    TableColumn("set", "string", description="(dev): the model-selection file, in no mean"),
    TableColumn("pairs", "int"),
    TableColumn("pearson", "float", description="Pearson x 100"),
    TableColumn("spearman", "float", description="Spearman x 100"),
]
_PAPER = TableColumn("paper", "float", description="the paper's P-SP Pearson x 100")


def _label(name: str, entry: Mapping[str, Any]) -> str:
    return f"{name} (dev)" if entry.get("dev") else name


def sts_table(sts: Mapping[str, Any], paper: Mapping[str, Any]) -> MetadataValue:
    """STS 2012-2016: each year's mean, then its datasets; last, the mean over the years."""
    rows = []
    for year, datasets in sts["datasets"].items():
        mean = sts["years"].get(year)
        if mean:
            rows.append(
                {
                    "set": f"STS {year} (mean)",
                    "pairs": int(mean["n"]),
                    "pearson": _round(mean["pearson"]),
                    "spearman": _round(mean["spearman"]),
                    "paper": paper["sts_years"].get(year),
                }
            )
        for name, entry in datasets.items():
            rows.append(
                {
                    "set": f"  {year} {_label(name, entry)}",
                    "pairs": int(entry["n"]),
                    "pearson": _round(entry["pearson"]),
                    "spearman": _round(entry["spearman"]),
                    "paper": None,
                }
            )
    if sts.get("mean"):
        years = sts["mean_over_years"]
        rows.append(
            {
                "set": "mean " + "-".join(dict.fromkeys([years[0], years[-1]]))
                if years
                else "mean",
                "pairs": int(sts["mean"]["n"]),
                "pearson": _round(sts["mean"]["pearson"]),
                "spearman": _round(sts["mean"]["spearman"]),
                "paper": paper["sts_mean"] if len(years) == 5 else None,
            }
        )
    schema = TableSchema(columns=[*_CORRELATION_COLUMNS, _PAPER])
    return MetadataValue.table([TableRecord(row) for row in rows], schema=schema)


def correlations_table(
    results: Mapping[str, Mapping[str, Any]], paper: Mapping[str, float] | None = None
) -> MetadataValue:
    """STS 2017 tracks or STS-B sets: one row each (with the paper's figure where it has one)."""
    columns = [*_CORRELATION_COLUMNS, _PAPER] if paper is not None else _CORRELATION_COLUMNS
    rows = []
    for name, entry in results.items():
        row = {
            "set": _label(name, entry),
            "pairs": int(entry["n"]),
            "pearson": _round(entry["pearson"]),
            "spearman": _round(entry["spearman"]),
        }
        if paper is not None:
            row["paper"] = paper.get(name)
        rows.append(TableRecord(row))
    return MetadataValue.table(rows, schema=TableSchema(columns=columns))


TATOEBA_COLUMNS = TableSchema(
    columns=[
        TableColumn("language", "string"),
        TableColumn("sentences", "int"),
        TableColumn("error_xx_en", "float", description="% retrieved wrong, xx -> en (cosine)"),
        TableColumn("error_en_xx", "float", description="% retrieved wrong, en -> xx (cosine)"),
        TableColumn("error_mean", "float", description="mean of both directions (cosine)"),
        TableColumn("margin_error_mean", "float", description="the same with margin scoring"),
        TableColumn("paper", "float", description="the paper's P-SP error %, mean"),
    ]
)


def tatoeba_table(tatoeba: Mapping[str, Mapping[str, Any]], paper: Mapping[str, float]):
    rows = [
        TableRecord(
            {
                "language": lang,
                "sentences": int(score["n"]),
                "error_xx_en": _round(score["cosine_xx_en"]),
                "error_en_xx": _round(score["cosine_en_xx"]),
                "error_mean": _round(score["cosine_mean"]),
                "margin_error_mean": _round(score["margin_mean"]),
                "paper": paper.get(lang),
            }
        )
        for lang, score in tatoeba.items()
    ]
    return MetadataValue.table(rows, schema=TATOEBA_COLUMNS)


def evaluation_tables(summary: Mapping[str, Any]) -> dict[str, MetadataValue]:
    """One table per suite the evaluation ran (``EvaluationResults.to_dict()``)."""
    paper = summary["paper"]
    tables = {}
    if summary["sts"]["datasets"]:
        tables["sts"] = sts_table(summary["sts"], paper)
    if summary["sts17"]:
        tables["sts17"] = correlations_table(summary["sts17"], paper["sts17"])
    if summary["stsb"]:
        tables["stsb"] = correlations_table(summary["stsb"])
    if summary["tatoeba"]:
        tables["tatoeba"] = tatoeba_table(summary["tatoeba"], paper["tatoeba"])
    return tables
