"""The evaluation's results as Dagster tables, shown inline on the materialization (markdown
longer than the UI's inline limit hides behind a "Show Markdown" click)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from dagster import MetadataValue, TableColumn, TableRecord, TableSchema

from psp_core.evaluation.results import PAPER_STS17, PAPER_TATOEBA


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
                "set": f"mean {_span(years)}" if years else "mean",
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


#: the scoreboard: one short row per language, its details in the tables below it
SCOREBOARD_COLUMNS = TableSchema(
    columns=[
        TableColumn("lang", "string"),
        TableColumn("sts_mean", "float", description="STS mean Pearson x 100 over sts_years"),
        TableColumn(
            "sts_years", "string", description="the years of the STS mean (paper: 2012-2016)"
        ),
        TableColumn("stsb_dev", "float", description="STS-B dev Pearson x 100"),
        TableColumn(
            "sts17_mean", "float", description="mean over its STS 2017 tracks (not dev): sts17"
        ),
        TableColumn(
            "tatoeba_error", "float", description="mean Tatoeba error % (cosine): see tatoeba"
        ),
        TableColumn("sentences_per_s", "int", description="embedding speed, tokenization included"),
    ]
)


def _mean(values: list[float]) -> float | None:
    return sum(values) / len(values) if values else None


def _span(years: list[str]) -> str:
    """``2012-2014`` (or ``2012`` alone)."""
    return "-".join(dict.fromkeys([years[0], years[-1]]))


def scoreboard_tables(
    rows: list[Mapping[str, Any]],
    compared: list[Mapping[str, Any]],
) -> dict[str, MetadataValue]:
    """The scoreboard's tables (``psp_core.evaluation.scoreboard_rows``): ``scoreboard`` with a
    short row per language, ``sts17`` and ``tatoeba`` with one row per track or language and the
    paper's figure, and ``multi_vs_languages`` (``psp_core.evaluation.scoreboard``) when there is a
    multilingual model. Tables, not markdown: they show inline at any length, with no wrapping
    cell."""
    board, tracks, tatoeba = [], [], []
    for row in rows:
        scored = {t: v for t, v in row["sts17_pearson"].items() if t != row["sts17_dev"]}
        errors = [v["cosine"] for v in row["tatoeba_error"].values()]
        speed = row["sentences_per_s"]
        board.append(
            {
                "lang": row["lang"],
                "sts_mean": _round(row["sts_mean_pearson"]),
                "sts_years": _span(row["sts_years"]) if row["sts_years"] else "-",
                "stsb_dev": _round(row["stsb_dev_pearson"]),
                "sts17_mean": _round(_mean(list(scored.values()))),
                "tatoeba_error": _round(_mean(errors)),
                "sentences_per_s": None if speed is None else int(speed),
            }
        )
        for track, value in sorted(row["sts17_pearson"].items()):
            dev = track == row["sts17_dev"]
            tracks.append(
                {
                    "lang": row["lang"],
                    "track": f"{track} (dev)" if dev else track,
                    "pearson": _round(value),
                    "paper": None if dev else PAPER_STS17.get(track),
                }
            )
        for code, value in sorted(row["tatoeba_error"].items()):
            tatoeba.append(
                {
                    "lang": row["lang"],
                    "language": code,
                    "error_mean": _round(value["cosine"]),
                    "margin_error_mean": _round(value["margin"]),
                    "paper": PAPER_TATOEBA.get(code),
                }
            )
    tables = {"scoreboard": _table(board, SCOREBOARD_COLUMNS)}
    if tracks:
        tables["sts17"] = _table(tracks, _STS17_BOARD)
    if tatoeba:
        tables["tatoeba"] = _table(tatoeba, _TATOEBA_BOARD)
    if compared:
        tables["multi_vs_languages"] = _table(
            [
                {**c, **{k: _round(c[k]) for k in ("score", "best_score", "better_by")}}
                for c in compared
            ],
            _COMPARISON,
        )
    return tables


def _table(rows: list[Mapping[str, Any]], schema: TableSchema) -> MetadataValue:
    return MetadataValue.table([TableRecord(dict(row)) for row in rows], schema=schema)


_STS17_BOARD = TableSchema(
    columns=[
        TableColumn("lang", "string"),
        TableColumn("track", "string", description="(dev): the model-selection file"),
        TableColumn("pearson", "float", description="Pearson x 100"),
        _PAPER,
    ]
)
_TATOEBA_BOARD = TableSchema(
    columns=[
        TableColumn("lang", "string"),
        *(
            column
            for column in TATOEBA_COLUMNS.columns
            if column.name in ("language", "error_mean", "margin_error_mean", "paper")
        ),
    ]
)
_COMPARISON = TableSchema(
    columns=[
        TableColumn("set", "string"),
        TableColumn("score", "float", description="the multilingual model's"),
        TableColumn("best_model", "string", description="the best per-language model on the set"),
        TableColumn("best_score", "float", description="its score"),
        TableColumn("better_by", "float", description="positive: the multilingual model is better"),
    ]
)


#: the speed record's fields, in the order shown: (field, what it is, unit)
SPEED_ROWS = (
    ("with_tokenization", "embed, tokenization included", "sentences/s"),
    ("without_tokenization", "embed pre-tokenized ids", "sentences/s"),
    ("sentences", "sentences embedded", "sentences"),
    ("batch_size", "batch size", "sentences"),
    ("torch_threads", "torch threads", "threads"),
    ("repeats", "repeats (the best is shown)", "runs"),
)


def speed_table(speed: dict) -> MetadataValue:
    """The speed measurement with its units (best of the repeats, on this machine)."""
    rows = [
        TableRecord({"measure": label, "value": float(speed[key]), "unit": unit})
        for key, label, unit in SPEED_ROWS
        if speed.get(key) is not None
    ]
    schema = TableSchema(
        columns=[
            TableColumn("measure", "string"),
            TableColumn("value", "float"),
            TableColumn("unit", "string"),
        ]
    )
    return MetadataValue.table(rows, schema=schema)
