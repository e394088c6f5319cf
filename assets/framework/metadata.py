"""Metadata a user wants to see on a materialization: counts, drop reasons, timings, paths."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from dagster import MetadataValue, TableColumn, TableRecord, TableSchema

from assets.framework.records import CorpusCap, PairCounts
from assets.framework.stage import Manifest


def _percent(part: int, whole: int) -> str:
    return f"{100.0 * part / whole:.2f}%" if whole else "-"


STAGE_FUNNEL_COLUMNS = TableSchema(
    columns=[
        TableColumn("pairs", "string", description="in, dropped for a reason, out"),
        TableColumn("count", "int"),
        TableColumn("share_of_input", "string"),
    ]
)


def funnel_table(report: PairCounts) -> MetadataValue:
    """One stage's counts as a table: in, each drop reason, out, and the pairs out that carry a
    note (``of out: unscored``)."""
    n_in = int(report.n_in)
    rows = [TableRecord({"pairs": "in", "count": n_in, "share_of_input": "100%"})]
    for reason, count in sorted(report.dropped.items(), key=lambda kv: -kv[1]):
        row = {"pairs": f"dropped: {reason}", "count": int(count)}
        rows.append(TableRecord(row | {"share_of_input": _percent(count, n_in)}))
    n_out = int(report.n_out)
    rows.append(
        TableRecord({"pairs": "out", "count": n_out, "share_of_input": _percent(n_out, n_in)})
    )
    for remark, count in sorted(report.notes.items()):
        row = {"pairs": f"of out: {remark}", "count": int(count)}
        rows.append(TableRecord(row | {"share_of_input": _percent(count, n_in)}))
    return MetadataValue.table(rows, schema=STAGE_FUNNEL_COLUMNS)


def report_metadata(manifest: Manifest, report: PairCounts, output: str) -> dict:
    """Metadata for a stage that turned one pair file into another (a reused output's note
    first, above the figures it is about)."""
    metadata: dict[str, Any] = common_metadata(manifest, output)
    metadata |= {
        "pairs_in": MetadataValue.int(int(report.n_in)),
        "pairs_out": MetadataValue.int(int(report.n_out)),
        "pairs_dropped": MetadataValue.int(int(report.n_in) - int(report.n_out)),
        "funnel": funnel_table(report),
        "seconds": MetadataValue.float(round(float(report.seconds), 1)),
    }
    for remark, count in sorted(report.notes.items()):  # e.g. pairs_unscored
        metadata[f"pairs_{remark}"] = MetadataValue.int(int(count))
    return metadata


def common_metadata(manifest: Manifest, output: str) -> dict:
    """Path, fingerprint and whether the stage's output was reused unchanged."""
    metadata = {
        "path": MetadataValue.path(str(manifest.output(output))),
        "fingerprint": MetadataValue.text(manifest.fingerprint),
        "reused": MetadataValue.bool(manifest.reused),
    }
    if manifest.reused:  # said first, so no one reads the earlier run's times as this run's
        when = f" ({manifest.written_at})" if manifest.written_at else ""
        metadata = {
            "reused_note": MetadataValue.text(
                "nothing recomputed: inputs, settings and code unchanged; the figures below "
                f"are those of the run that computed it{when}"
            ),
            **metadata,
        }
    return metadata


CORPUS_COLUMNS = TableSchema(
    columns=[
        TableColumn("corpus", "string"),
        TableColumn("lines_read", "int", description="line pairs read from the source"),
        TableColumn("passing", "int", description="pairs that passed every filter and dedup"),
        TableColumn("cap", "string", description="at most this many kept (seeded sample)"),
        TableColumn("kept", "int", description="pairs the language's training data takes"),
    ]
)


def corpora_table(lines_read: Mapping[str, int], caps: Mapping[str, CorpusCap]) -> MetadataValue:
    """Per corpus: lines read (raw_pairs), pairs passing the filters, cap and pairs kept."""
    rows = [
        TableRecord(
            {
                "corpus": name,
                "lines_read": int(lines_read.get(name, 0)),
                "passing": corpus.passing,
                "cap": "-" if corpus.cap is None else f"{corpus.cap:,}",
                "kept": corpus.kept,
            }
        )
        for name, corpus in caps.items()
    ]
    return MetadataValue.table(rows, schema=CORPUS_COLUMNS)


def settings_table(
    settings: Mapping[str, Any], origins: Mapping[str, str] | None = None
) -> MetadataValue:
    """A flat mapping (settings, speeds) as a two-column table instead of a JSON blob; with
    ``origins``, a third column says where each value was set."""
    columns = [TableColumn("name", "string"), TableColumn("value", "string")]
    if origins:
        columns.append(TableColumn("from", "string", description="where the value was set"))
    rows = [
        TableRecord(
            {"name": str(name), "value": _readable(value)}
            | ({"from": origins.get(name, "-")} if origins else {})
        )
        for name, value in sorted(settings.items())
    ]
    return MetadataValue.table(rows, schema=TableSchema(columns=columns))


def _readable(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:,.0f}" if abs(value) >= 1e4 else f"{value:.4g}"  # 221,100, not 2.211e+05
    if isinstance(value, list | tuple):
        return ", ".join(_readable(v) for v in value) or "-"
    return "-" if value is None else str(value)


FUNNEL_COLUMNS = TableSchema(
    columns=[
        TableColumn("stage", "string"),
        TableColumn("in", "int", description="pairs into the stage"),
        TableColumn("out", "int", description="pairs it kept"),
        TableColumn("kept", "string", description="share of its input"),
        TableColumn("dropped", "string", description="reason: pairs"),
    ]
)


def pipeline_funnel_table(stages: Sequence[tuple[str, PairCounts]]) -> MetadataValue:
    """Several stages' counts as one funnel: pairs left after each stage and why they went."""
    rows = [
        TableRecord(
            {
                "stage": name,
                "in": int(report.n_in),
                "out": int(report.n_out),
                "kept": _percent(report.n_out, report.n_in),
                "dropped": ", ".join(f"{k}: {v:,}" for k, v in sorted(report.dropped.items()))
                or "-",
            }
        )
        for name, report in stages
    ]
    return MetadataValue.table(rows, schema=FUNNEL_COLUMNS)


EPOCH_COLUMNS = TableSchema(
    columns=[
        TableColumn("epoch", "int"),
        TableColumn("steps", "int", description="steps trained by the end of the epoch"),
        TableColumn("mean_loss", "float"),
        TableColumn("pairs_per_second", "float"),
        TableColumn("dev_score", "float", description="Pearson x 100 on the dev STS file"),
    ]
)


def epochs_table(history: Sequence[Mapping[str, Any]]) -> MetadataValue:
    """Training's per-epoch records (loss, speed, dev score), rounded, as a table."""

    def rounded(value: Any, digits: int) -> float | None:
        return None if value is None else round(float(value), digits)

    # a training without model selection has no dev score: no empty column for it
    with_dev = any(h.get("dev_score") is not None for h in history)
    columns = [c for c in EPOCH_COLUMNS.columns if with_dev or c.name != "dev_score"]
    rows = []
    for h in history:
        row = {
            "epoch": int(h["epoch"]) + 1,
            "steps": int(h["steps"]),
            "mean_loss": rounded(h.get("loss"), 4),
            "pairs_per_second": rounded(h.get("pairs_per_second"), 0),
        }
        if with_dev:
            row["dev_score"] = rounded(h.get("dev_score"), 2)
        rows.append(TableRecord(row))
    return MetadataValue.table(rows, schema=TableSchema(columns=columns))
