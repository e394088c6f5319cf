"""``sts``: SemEval STS 2012-2016 (English), Pearson and Spearman x 100 per dataset, averaged
per year, then over the years, as the paper averages them (``sts/YEAR/NAME.tsv``).

A mean over less than the paper's datasets carries a footnote naming what is missing beside the
paper's number (:mod:`psp_core.evaluation.coverage`); the dev set, when it is one of these
files, is reported, marked dev, and in no mean."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from psp_core.evaluation.coverage import PAPER_STS_DATASETS, StsCoverage, sts_coverage
from psp_core.evaluation.sts import STS_YEAR_DATASETS, Correlation, evaluate_sts_years
from psp_core.evaluation.suite import (
    Column,
    DevDataset,
    EvalSource,
    Score,
    Suite,
    SuiteRun,
    Table,
    register,
)
from psp_core.evaluation.suites._correlations import (
    CORRELATION_COLUMNS,
    PAPER_COLUMN,
    correlation_json,
    correlation_row,
    dataset_json,
    fmt,
    labelled,
    rounded,
)

if TYPE_CHECKING:
    from psp_core.inference.model import PSPModel

#: Wieting et al., "Paraphrastic Representations at Scale", P-SP (Pearson x 100).
PAPER_STS_YEARS = {"2012": 68.7, "2013": 64.7, "2014": 78.1, "2015": 81.4, "2016": 80.0}
PAPER_STS_MEAN = 74.6
#: The years the paper's STS mean covers.
PAPER_STS_MEAN_YEARS = "2012-2016"
STSWIKI = "http://ixa2.si.ehu.es/stswiki/images"
_ARCHIVES = {"2012": "4/40", "2013": "2/2f", "2014": "8/8c", "2015": "d/da", "2016": "9/98"}

Years = Mapping[str, Mapping[str, Correlation]]


def _is_dev(dev: DevDataset | None, name: str, year: str) -> bool:
    return dev == DevDataset("sts", name, year)


def year_means(result: Years, dev: DevDataset | None) -> dict[str, Correlation]:
    """Mean over each year's datasets, the dev set left out."""
    return {
        year: Correlation.mean(kept)
        for year, sets in result.items()
        if (kept := [c for n, c in sets.items() if not _is_dev(dev, n, year)])
    }


def mean_of_years(result: Years, dev: DevDataset | None) -> Correlation | None:
    """Mean over the years present (the paper's is over 2012-2016: see :func:`coverage`)."""
    years = list(year_means(result, dev).values())
    return Correlation.mean(years) if years else None


def coverage(result: Years, dev: DevDataset | None) -> StsCoverage:
    """What the mean and each year's mean are over, next to the paper's."""
    return sts_coverage(result, dev)


def _span(years: list[str]) -> str:
    """``2012-2014`` (or ``2012`` alone)."""
    return "-".join(dict.fromkeys([years[0], years[-1]]))


@register
class StsYears(Suite):
    name = "sts"
    title = "STS 2012-2016"
    files = ("sts/*/*.tsv",)
    layout = "sts/YEAR/NAME.tsv (gold<TAB>s1<TAB>s2)"
    sources = {
        f"STS{year}-en-test.zip": EvalSource(
            f"{STSWIKI}/{path}/STS{year}-en-test.zip", f"sts{year}"
        )
        for year, path in _ARCHIVES.items()
    }
    paper = {
        "sts_years": PAPER_STS_YEARS,
        "sts_mean": PAPER_STS_MEAN,
        "sts_mean_years": PAPER_STS_MEAN_YEARS,
        "sts_datasets": {y: list(n) for y, n in PAPER_STS_DATASETS.items()},
    }

    def subsets_for(self, lang: str) -> tuple[str, ...]:
        return ()  # English STS for every language's model, as the paper reports

    def evaluate(self, model: PSPModel, run: SuiteRun) -> dict[str, dict[str, Correlation]]:
        return evaluate_sts_years(model, run.eval_dir, run.missing)

    def dev_dataset(self, parts: tuple[str, ...]) -> DevDataset | None:
        if len(parts) == 3 and parts[0] == "sts" and parts[2].endswith(".tsv"):
            return DevDataset("sts", parts[2].removesuffix(".tsv"), parts[1])
        return None

    def evaluated(self, result: Years, dev: DevDataset) -> bool:
        return dev.suite == "sts" and dev.name in result.get(dev.year or "", {})

    def to_dict(self, result: Years, dev: DevDataset | None) -> dict[str, Any]:
        mean = mean_of_years(result, dev)
        covered = coverage(result, dev)
        return {
            "datasets": {
                y: {n: dataset_json(c, _is_dev(dev, n, y)) for n, c in d.items()}
                for y, d in result.items()
            },
            "years": {y: correlation_json(c) for y, c in year_means(result, dev).items()},
            "mean": correlation_json(mean) if mean else None,
            "mean_over_years": list(covered.years),
            "years_absent": list(covered.years_absent),
            "datasets_absent": {y: list(n) for y, n in covered.absent.items()},
            "datasets_extra": {y: list(n) for y, n in covered.extra.items()},
            "mean_note": covered.mean_note() if mean else None,
            "year_notes": {
                y: covered.year_note(y, detail=True) for y in covered.years if covered.year_note(y)
            },
        }

    def markdown(self, result: Years, dev: DevDataset | None) -> str:
        covered, years = coverage(result, dev), year_means(result, dev)
        footnotes: list[str] = []

        def marker(note: str | None) -> str:
            if note is None:
                return ""
            footnotes.append(f"[{len(footnotes) + 1}] {note}")
            return f" [{len(footnotes)}]"

        rows = ["| STS | n | Pearson | Spearman | paper (Pearson) |", "|---|---:|---:|---:|---:|"]
        for year, datasets in result.items():
            for name, c in datasets.items():
                label = labelled(f"{year} {name}", _is_dev(dev, name, year))
                rows.append(f"| {label} | {c.n} | {fmt(c.pearson)} | {fmt(c.spearman)} | |")
            if year not in years:  # only the dev set this year
                continue
            c, paper = years[year], PAPER_STS_YEARS.get(year)
            note = marker(covered.year_footnote(year, c.pearson, paper))
            rows.append(
                f"| **{year} mean**{note} | {c.n} | **{fmt(c.pearson)}** "
                f"| **{fmt(c.spearman)}** | {fmt(paper)} |"
            )
        mean = mean_of_years(result, dev)
        if mean is not None:
            footnote = covered.mean_footnote(mean.pearson, PAPER_STS_MEAN, PAPER_STS_MEAN_YEARS)
            label = f"STS {PAPER_STS_MEAN_YEARS} mean"
            if footnote:
                label += f", over {covered.span}"
            rows.append(
                f"| **{label}**{marker(footnote)} | {mean.n} "
                f"| **{fmt(mean.pearson)}** | **{fmt(mean.spearman)}** "
                f"| {fmt(PAPER_STS_MEAN)} ({PAPER_STS_MEAN_YEARS}) |"
            )
        return "\n".join(rows + ([""] + footnotes if footnotes else []))

    def scores(self, part: Mapping[str, Any], dev: DevDataset | None) -> list[Score]:
        mean = (part or {}).get("mean")
        if not mean:
            return []
        value = round(mean["pearson"], 2)
        return [Score("sts_mean", "STS mean (Pearson)", value, paper=PAPER_STS_MEAN, headline=True)]

    def tables(self, part: Mapping[str, Any], dev: DevDataset | None) -> dict[str, Table]:
        """Each year's mean, then its datasets; last, the mean over the years."""
        if not part["datasets"]:
            return {}
        rows = []
        for year, datasets in part["datasets"].items():
            mean = part["years"].get(year)
            if mean:
                row = correlation_row(f"STS {year} (mean)", mean)
                rows.append({**row, "paper": PAPER_STS_YEARS.get(year)})
            for name, entry in datasets.items():
                row = correlation_row(f"  {year} {labelled(name, entry.get('dev', False))}", entry)
                rows.append({**row, "paper": None})
        if part.get("mean"):
            years = part["mean_over_years"]
            row = correlation_row(f"mean {_span(years)}" if years else "mean", part["mean"])
            rows.append({**row, "paper": PAPER_STS_MEAN if len(years) == 5 else None})
        return {"sts": Table((*CORRELATION_COLUMNS, PAPER_COLUMN), rows)}

    def board_cells(self, part: Mapping[str, Any], dev: DevDataset | None) -> dict[str, Any]:
        part = part or {}
        mean = part.get("mean")
        covered = coverage({y: list(n) for y, n in (part.get("datasets") or {}).items()}, dev)
        return {
            "sts_mean_pearson": mean["pearson"] if mean else None,
            "sts_years": list(covered.years),
            "sts_mean_note": covered.mean_note() if mean else None,
        }

    def board_markdown(self, row: Mapping[str, Any]) -> list[tuple[str, str, str]]:
        cell = fmt(row["sts_mean_pearson"])
        if row["sts_mean_note"]:
            cell += f" {row['sts_mean_note']}"
        elif row["sts_years"]:
            cell += f" over {PAPER_STS_MEAN_YEARS}"
        return [
            ("STS mean (Pearson)", "---", cell),
            (f"paper STS {PAPER_STS_MEAN_YEARS} mean", "---:", f"{PAPER_STS_MEAN:.1f}"),
        ]

    def compared(self, row: Mapping[str, Any]) -> list:
        return [("STS mean (Pearson)", lambda r: r["sts_mean_pearson"], True, True)]

    def board_columns(self) -> tuple[Column, ...]:
        return (
            Column("sts_mean", "float", "STS mean Pearson x 100 over sts_years"),
            Column("sts_years", "string", "the years of the STS mean (paper: 2012-2016)"),
        )

    def board_values(self, row: Mapping[str, Any]) -> dict[str, Any]:
        years = row["sts_years"]
        return {
            "sts_mean": rounded(row["sts_mean_pearson"]),
            "sts_years": _span(years) if years else "-",
        }

    def convert(self, downloads: Mapping[str, list[Path]], eval_dir: Path) -> list[str]:
        from psp_core.evaluation import archives  # (zip and tar: imported when converting)

        return [
            written
            for fmt_name, paths in downloads.items()
            for path in paths
            for written in archives.convert_sts_year(path, fmt_name.removeprefix("sts"), eval_dir)
        ]


__all__ = ["PAPER_STS_MEAN", "PAPER_STS_MEAN_YEARS", "PAPER_STS_YEARS", "STS_YEAR_DATASETS"]
