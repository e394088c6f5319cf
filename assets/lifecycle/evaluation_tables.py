"""The evaluation's results as Dagster tables, shown inline on the materialization (markdown
longer than the UI's inline limit hides behind a "Show Markdown" click): each registered suite's
tables (:meth:`psp_core.evaluation.suite.Suite.tables`), and the scoreboard's."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from dagster import MetadataValue, TableColumn, TableRecord, TableSchema

from psp_core.evaluation.registry import dev_dataset, registered
from psp_core.evaluation.suite import Column, Table


def _round(value: Any, digits: int = 1) -> float | None:
    return None if value is None else round(float(value), digits)


def _schema(columns: tuple[Column, ...] | list[Column]) -> TableSchema:
    return TableSchema(
        columns=[TableColumn(c.name, c.type, description=c.description or None) for c in columns]
    )


def dagster_table(table: Table) -> MetadataValue:
    """A suite's :class:`~psp_core.evaluation.suite.Table` as the UI's table."""
    return MetadataValue.table(
        [TableRecord(dict(row)) for row in table.rows], schema=_schema(table.columns)
    )


def evaluation_tables(summary: Mapping[str, Any]) -> dict[str, MetadataValue]:
    """One table (or more) per suite the evaluation ran (``EvaluationResults.to_dict()``)."""
    tables, dev = {}, dev_dataset(summary.get("dev_sts"))
    for name, each in registered().items():
        if summary.get(name):
            for key, table in each.tables(summary[name], dev).items():
                tables[key] = dagster_table(table)
    return tables


_LANG = Column("lang", "string")
_COMPARISON = (
    Column("set", "string"),
    Column("score", "float", "the multilingual model's"),
    Column("best_model", "string", "the best per-language model on the set"),
    Column("best_score", "float", "its score"),
    Column("better_by", "float", "positive: the multilingual model is better"),
)


def scoreboard_tables(
    rows: list[Mapping[str, Any]],
    compared: list[Mapping[str, Any]],
) -> dict[str, MetadataValue]:
    """The scoreboard's tables (``psp_core.evaluation.scoreboard_rows``): ``scoreboard`` with a
    short row per language (each suite's columns), each suite's detail table (one row per
    language and subset, STS 2017 track or retrieval language, with the paper's figure), and
    ``multi_vs_languages`` (``psp_core.evaluation.scoreboard``) when there is a multilingual
    model. Tables, not markdown: they show inline at any length, with no wrapping cell."""
    suites = list(registered().values())
    columns = [_LANG, *(column for each in suites for column in each.board_columns())]
    board = [
        {
            "lang": row["lang"],
            **{k: v for each in suites for k, v in each.board_values(row).items()},
        }
        for row in rows
    ]
    tables = {"scoreboard": dagster_table(Table(tuple(columns), board))}
    for each in suites:
        details = each.board_details(rows)
        if details is not None:
            tables[each.name] = dagster_table(details)
    if compared:
        rounded = [
            {**c, **{k: _round(c[k]) for k in ("score", "best_score", "better_by")}}
            for c in compared
        ]
        tables["multi_vs_languages"] = dagster_table(Table(_COMPARISON, rounded))
    return tables
