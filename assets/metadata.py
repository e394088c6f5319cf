"""Metadata a user wants to see on a materialization: counts, drop reasons, timings, paths."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from dagster import MetadataValue, TableColumn, TableRecord, TableSchema

from assets.stage import Manifest


def _percent(part: int, whole: int) -> str:
    return f"{100.0 * part / whole:.2f}%" if whole else "-"


def funnel_markdown(report: Mapping[str, Any]) -> str:
    """One stage's ``StageReport.as_dict()`` as a markdown table: in, each drop, out."""
    n_in = int(report["n_in"])
    rows = ["| | pairs | share of input |", "|---|---:|---:|", f"| in | {n_in:,} | 100% |"]
    for reason, count in sorted(report.get("dropped", {}).items(), key=lambda kv: -kv[1]):
        rows.append(f"| dropped: {reason} | {count:,} | {_percent(count, n_in)} |")
    rows.append(f"| **out** | **{int(report['n_out']):,}** | {_percent(report['n_out'], n_in)} |")
    return "\n".join(rows)


def pipeline_funnel_markdown(stages: Sequence[tuple[str, Mapping[str, Any]]]) -> str:
    """Several stages' reports as one funnel: pairs left after each stage and why they went."""
    rows = ["| stage | in | out | kept | dropped (reason: pairs) |", "|---|---:|---:|---:|---|"]
    for name, report in stages:
        drops = ", ".join(f"{k}: {v:,}" for k, v in sorted(report.get("dropped", {}).items()))
        rows.append(
            f"| {name} | {report['n_in']:,} | {report['n_out']:,} "
            f"| {_percent(report['n_out'], report['n_in'])} | {drops or '-'} |"
        )
    return "\n".join(rows)


def report_metadata(manifest: Manifest, report: Mapping[str, Any], output: str) -> dict:
    """Metadata for a stage that turned one pair file into another."""
    metadata: dict[str, Any] = {
        "pairs_in": MetadataValue.int(int(report["n_in"])),
        "pairs_out": MetadataValue.int(int(report["n_out"])),
        "pairs_dropped": MetadataValue.int(int(report["n_in"]) - int(report["n_out"])),
        "funnel": MetadataValue.md(funnel_markdown(report)),
        "seconds": MetadataValue.float(float(report.get("seconds", 0.0))),
    }
    metadata.update(common_metadata(manifest, output))
    return metadata


def common_metadata(manifest: Manifest, output: str) -> dict:
    """Path, fingerprint and whether the stage's output was reused unchanged."""
    return {
        "path": MetadataValue.path(str(manifest.output(output))),
        "fingerprint": MetadataValue.text(manifest.fingerprint),
        "reused": MetadataValue.bool(manifest.reused),
    }


CORPUS_COLUMNS = TableSchema(
    columns=[
        TableColumn("corpus", "string"),
        TableColumn("lines_read", "int", description="line pairs read from the source"),
        TableColumn("passing", "int", description="pairs that passed every filter and dedup"),
        TableColumn("cap", "string", description="at most this many kept (seeded sample)"),
        TableColumn("kept", "int", description="pairs the language's training data takes"),
    ]
)


def corpora_table(lines_read: Mapping[str, int], caps_record: Mapping[str, Any]) -> MetadataValue:
    """Per corpus: lines read (raw_pairs), pairs passing the filters, cap and pairs kept."""
    rows = []
    for name, counts in caps_record.get("corpora", {}).items():
        cap = counts.get("cap")
        rows.append(
            TableRecord(
                {
                    "corpus": name,
                    "lines_read": int(lines_read.get(name, 0)),
                    "passing": int(counts["passing"]),
                    "cap": "-" if cap is None else f"{cap:,}",
                    "kept": int(counts["kept"]),
                }
            )
        )
    return MetadataValue.table(rows, schema=CORPUS_COLUMNS)
