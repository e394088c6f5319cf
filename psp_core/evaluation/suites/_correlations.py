"""What the STS suites share: a correlation's JSON, its markdown cell and table row, and a suite
whose result is one correlation per named set (``CorrelationSuite``: STS 2017, STS-B)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING, Any

from psp_core.evaluation.sts import Correlation, StsEvaluator
from psp_core.evaluation.suite import Column, DevDataset, Suite, Table

if TYPE_CHECKING:
    from psp_core.inference.model import PSPModel

CORRELATION_COLUMNS = (
    Column("set", "string", "(dev): the model-selection file, in no mean"),
    Column("pairs", "int"),
    Column("pearson", "float", "Pearson x 100"),
    Column("spearman", "float", "Spearman x 100"),
)
PAPER_COLUMN = Column("paper", "float", "the paper's P-SP Pearson x 100")


def fmt(value: float | None, digits: int = 1) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def rounded(value: Any, digits: int = 1) -> float | None:
    return None if value is None else round(float(value), digits)


def correlation_json(c: Correlation) -> dict[str, float]:
    return {"pearson": c.pearson, "spearman": c.spearman, "n": c.n}


def dataset_json(c: Correlation, dev: bool) -> dict[str, Any]:
    return {**correlation_json(c), "dev": dev}


def labelled(text: str, dev: bool) -> str:
    return f"{text} (dev)" if dev else text


def correlation_row(label: str, entry: Mapping[str, Any]) -> dict[str, Any]:
    return {
        "set": label,
        "pairs": int(entry["n"]),
        "pearson": rounded(entry["pearson"]),
        "spearman": rounded(entry["spearman"]),
    }


class CorrelationSuite(Suite):
    """A suite of STS files ``<name>/SET.tsv``, one correlation each; the dev set, when it is
    one of them, is marked and in no mean."""

    def empty(self) -> dict:
        return {}

    def dev_dataset(self, parts: tuple[str, ...]) -> DevDataset | None:
        if len(parts) == 2 and parts[0] == self.name and PurePosixPath(parts[1]).suffix == ".tsv":
            return DevDataset(self.name, PurePosixPath(parts[1]).stem)
        return None

    def is_dev(self, name: str, dev: DevDataset | None) -> bool:
        return dev == DevDataset(self.name, name)

    def evaluated(self, result: Mapping[str, Correlation], dev: DevDataset) -> bool:
        return dev.suite == self.name and dev.name in result

    def to_dict(self, result: Mapping[str, Correlation], dev: DevDataset | None) -> dict:
        return {n: dataset_json(c, self.is_dev(n, dev)) for n, c in result.items()}

    def dev_scorer(self, path: Path) -> Callable[[PSPModel], float]:
        return StsEvaluator(path)

    def correlations_table(
        self, part: Mapping[str, Mapping[str, Any]], paper: Mapping[str, float] | None
    ) -> Table:
        """One row per set (with the paper's figure where it has one)."""
        columns = (*CORRELATION_COLUMNS, PAPER_COLUMN) if paper is not None else CORRELATION_COLUMNS
        rows = []
        for name, entry in part.items():
            row = correlation_row(labelled(name, entry.get("dev", False)), entry)
            if paper is not None:
                row["paper"] = paper.get(name)
            rows.append(row)
        return Table(columns, rows)
