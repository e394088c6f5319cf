"""``stsb``: the STS Benchmark's dev and test splits (``stsb/{dev,test}.tsv``), Pearson and
Spearman x 100, for the English model. Its dev split is development data whatever the model
was selected on (the promotion gate scores it), so it is in no test score; its train split is
training data for supervised STS models, not a result."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from psp_core.evaluation.sts import Correlation, evaluate_stsb
from psp_core.evaluation.suite import (
    Column,
    DevDataset,
    EvalSource,
    Score,
    SuiteRun,
    Table,
    register,
)
from psp_core.evaluation.suites._correlations import CorrelationSuite, fmt, labelled, rounded

if TYPE_CHECKING:
    from psp_core.inference.model import PSPModel

STSWIKI = "http://ixa2.si.ehu.es/stswiki/images"


@register
class StsBenchmark(CorrelationSuite):
    name = "stsb"
    title = "STS Benchmark"
    files = ("stsb/*.tsv",)
    layout = "stsb/{train,dev,test}.tsv (gold<TAB>s1<TAB>s2)"
    sources = {"Stsbenchmark.tar.gz": EvalSource(f"{STSWIKI}/4/48/Stsbenchmark.tar.gz", "stsb")}
    dev_files = {"stsb_dev": "stsb/dev.tsv"}

    def subsets_for(self, lang: str) -> tuple[str, ...] | None:
        return () if lang == "en" else None

    def evaluate(self, model: PSPModel, run: SuiteRun) -> dict[str, Correlation]:
        return evaluate_stsb(model, run.eval_dir, run.missing)

    def markdown(self, result: Mapping[str, Correlation], dev: DevDataset | None) -> str:
        rows = ["| STS Benchmark | n | Pearson | Spearman |", "|---|---:|---:|---:|"]
        for name, c in result.items():
            # its dev split is development data whatever the model was selected on
            label = labelled(name, self.is_dev(name, dev) or name == "dev")
            rows.append(f"| {label} | {c.n} | {fmt(c.pearson)} | {fmt(c.spearman)} |")
        return "\n".join(rows)

    def scores(self, part: Mapping[str, Any], dev: DevDataset | None) -> list[Score]:
        dev = (part or {}).get("dev")
        if not dev:
            return []
        return [Score("stsb_dev", "STS-B dev (Pearson)", dev["pearson"], headline=True, dev=True)]

    def tables(self, part: Mapping[str, Any], dev: DevDataset | None) -> dict[str, Table]:
        return {"stsb": self.correlations_table(part, None)} if part else {}

    def board_cells(self, part: Mapping[str, Any], dev: DevDataset | None) -> dict[str, Any]:
        return {
            "stsb_dev_pearson": ((part or {}).get("dev") or {}).get("pearson"),
            "stsb_dev_is_dev_set": dev == DevDataset("stsb", "dev"),
        }

    def board_markdown(self, row: Mapping[str, Any]) -> list[tuple[str, str, str]]:
        cell = fmt(row["stsb_dev_pearson"]) + (" (dev)" if row["stsb_dev_is_dev_set"] else "")
        return [("STS-B dev split", "---:", cell)]

    def compared(self, row: Mapping[str, Any]) -> list:
        return [("STS-B dev (Pearson)", lambda r: r["stsb_dev_pearson"], True, True)]

    def board_columns(self) -> tuple[Column, ...]:
        return (Column("stsb_dev", "float", "STS-B dev Pearson x 100"),)

    def board_values(self, row: Mapping[str, Any]) -> dict[str, Any]:
        return {"stsb_dev": rounded(row["stsb_dev_pearson"])}

    def convert(self, downloads: Mapping[str, list[Path]], eval_dir: Path) -> list[str]:
        from psp_core.evaluation import archives  # (zip and tar: imported when converting)

        return [
            w for path in downloads.get("stsb", []) for w in archives.convert_stsb(path, eval_dir)
        ]
