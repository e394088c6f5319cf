"""What our STS means cover next to the paper's, and which STS file was the dev set.

The paper's STS 2012-2016 figure (74.6) is the mean of five per-year means, each over that year's
datasets, 2013's SMT set included (the reference code's ``evaluate_sts.py`` lists it; it is not
public, so no evaluation directory has it). A mean over less (a year absent, a dataset absent,
the dev set left out) is not the same number: :func:`sts_coverage` says what ours is over, and
:class:`StsCoverage` turns that into the footnotes the tables print beside the paper's numbers.

The dev set is the STS file training selected the best epoch on (``TrainingConfig.dev_sts``,
``psp train --dev-sts``; STS 2017 en-en by default, as in the paper). Its row is reported, marked
dev, and left out of every mean (``psp_core.evaluation.registry.dev_dataset`` maps its path,
relative to the evaluation directory, to the dataset it names).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from psp_core.evaluation.sts import STS_YEAR_DATASETS
from psp_core.evaluation.suite import DevDataset

#: The datasets behind each of the paper's per-year means.
PAPER_STS_DATASETS: dict[str, tuple[str, ...]] = {
    **STS_YEAR_DATASETS,
    "2013": (*STS_YEAR_DATASETS["2013"], "SMT"),
}
#: Datasets the paper used that were never released publicly.
NOT_PUBLIC = {("2013", "SMT")}


def _and(names: list[str]) -> str:
    """``a``, ``a and b``, ``a, b and c``."""
    return names[0] if len(names) == 1 else ", ".join(names[:-1]) + " and " + names[-1]


def _span(years: Iterable[str]) -> str:
    """``2012-2014`` for consecutive years, ``2012, 2014`` otherwise."""
    years = sorted(years)
    numbers = [int(y) for y in years] if all(y.isdigit() for y in years) else []
    if len(years) > 1 and numbers == list(range(numbers[0], numbers[0] + len(numbers))):
        return f"{years[0]}-{years[-1]}"
    return ", ".join(years)


@dataclass(frozen=True)
class StsCoverage:
    """What an STS mean is over, next to the paper's.

    Attributes:
        years: the years in the mean (each with at least one dataset that is not the dev set).
        years_absent: the paper's years with no dataset in the mean.
        absent: year in the mean -> the paper's datasets missing from that year's mean.
        extra: year -> datasets in that year's mean that the paper did not use.
        dev: the dev dataset ``(year, name)`` when it is an STS 2012-2016 file that was
            evaluated (and left out of the mean).
    """

    years: tuple[str, ...]
    years_absent: tuple[str, ...]
    absent: dict[str, tuple[str, ...]]
    extra: dict[str, tuple[str, ...]]
    dev: tuple[str, str] | None = None

    @property
    def span(self) -> str:
        """The years of the mean: ``2012-2014``, or ``2012, 2014`` when not consecutive."""
        return _span(self.years)

    def year_note(self, year: str, detail: bool = False) -> str | None:
        """How ``year``'s mean differs from the paper's (``without SMT``), or None; ``detail``
        adds why a dataset is absent where that is known (``SMT (not public)``)."""
        absent = [n for n in self.absent.get(year, ()) if self.dev != (year, n)]
        if detail:
            absent = [f"{n} (not public)" if (year, n) in NOT_PUBLIC else n for n in absent]
        if self.dev is not None and self.dev[0] == year:
            absent.append(f"the dev set {self.dev[1]}")
        parts = [f"without {_and(absent)}"] if absent else []
        if self.extra.get(year):
            parts.append("with " + ", ".join(self.extra[year]) + ", which the paper did not use")
        return "; ".join(parts) or None

    def mean_note(self) -> str | None:
        """What the mean of years is over when that is less (or other) than the paper's:
        ``over 2012-2014 (2015, 2016 absent; 2013 without SMT)``. None when the mean
        covers exactly the paper's datasets."""
        parts = []
        if self.years_absent:
            absent = [y for y in self.years_absent if self.dev is None or y != self.dev[0]]
            if absent:
                parts.append(", ".join(absent) + " absent")
        for year in self.years:
            note = self.year_note(year)
            if note:
                parts.append(f"{year} {note}")
        if self.dev is not None and self.dev[0] not in self.years:
            parts.append(f"{self.dev[0]} only the dev set {self.dev[1]}")
        if not parts:
            return None
        return f"over {self.span} ({'; '.join(parts)})"

    def year_footnote(self, year: str, ours: float, paper: float | None) -> str | None:
        """``2013 mean <ours> without SMT (not public); paper 64.7 over all 4 datasets``."""
        note = self.year_note(year, detail=True)
        if note is None:
            return None
        text = f"{year} mean {ours:.1f} {note}"
        if paper is not None:
            text += f"; paper {paper:.1f} over all {len(PAPER_STS_DATASETS[year])} datasets"
        return text

    def mean_footnote(self, ours: float, paper: float, paper_years: str) -> str | None:
        """``STS 2012-2016 mean <ours> over 2012-2014 (...); paper 74.6 over 2012-2016``."""
        note = self.mean_note()
        if note is None:
            return None
        return f"STS {paper_years} mean {ours:.1f} {note}; paper {paper:.1f} over {paper_years}"


def sts_coverage(
    evaluated: Mapping[str, Iterable[str]], dev: DevDataset | None = None
) -> StsCoverage:
    """Compare the datasets evaluated (``{year: names}``) with the paper's; the dev set, when it
    is one of them, counts as absent from its year's mean."""
    evaluated = {year: list(names) for year, names in evaluated.items()}
    dev_pair = (dev.year, dev.name) if dev is not None and dev.suite == "sts" else None
    in_mean = {
        year: [n for n in names if (year, n) != dev_pair] for year, names in evaluated.items()
    }
    years = tuple(sorted(year for year, names in in_mean.items() if names))
    absent = {
        year: tuple(n for n in PAPER_STS_DATASETS.get(year, ()) if n not in in_mean[year])
        for year in years
    }
    extra = {
        year: tuple(sorted(n for n in in_mean[year] if n not in PAPER_STS_DATASETS.get(year, ())))
        for year in years
    }
    return StsCoverage(
        years=years,
        years_absent=tuple(y for y in PAPER_STS_DATASETS if y not in years),
        absent={y: names for y, names in absent.items() if names},
        extra={y: names for y, names in extra.items() if names},
        dev=dev_pair if dev_pair and dev_pair[1] in evaluated.get(dev_pair[0], []) else None,
    )
