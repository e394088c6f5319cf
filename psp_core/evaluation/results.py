"""Evaluation results: a plain dataclass that turns into a JSON-ready dict and markdown tables,
with the paper's P-SP numbers beside ours (docs/evaluation.md).

The dev set (the STS file the model was selected on) is reported, marked dev, and left out of
every mean; a mean over fewer datasets than the paper's carries a footnote naming what is
missing, next to the paper's number (:mod:`psp_core.evaluation.coverage`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from psp_core.evaluation.coverage import (
    PAPER_STS_DATASETS,
    DevDataset,
    StsCoverage,
    dev_dataset,
    sts_coverage,
)
from psp_core.evaluation.speed import SpeedResult
from psp_core.evaluation.sts import STS17_TRACKS, Correlation, sts_year_means
from psp_core.evaluation.tatoeba import TatoebaScore

#: Wieting et al., "Paraphrastic Representations at Scale", P-SP (Pearson x 100).
PAPER_STS_YEARS = {"2012": 68.7, "2013": 64.7, "2014": 78.1, "2015": 81.4, "2016": 80.0}
PAPER_STS_MEAN = 74.6
#: The years the paper's STS mean covers.
PAPER_STS_MEAN_YEARS = "2012-2016"
PAPER_STS17 = {"ar-ar": 76.2, "ar-en": 78.3, "es-es": 85.8, "es-en": 78.4, "tr-en": 79.2}
#: Tatoeba error rate %, mean of both directions, keyed by LASER's ISO 639-3 codes.
PAPER_TATOEBA = {"ara": 8.8, "deu": 1.5, "spa": 2.4, "fra": 5.4, "rus": 5.6, "tur": 1.4}
#: Sentences/s on one CPU core.
PAPER_SPEED_CPU = 12_776


def _fmt(value: float | None, digits: int = 1) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


@dataclass
class EvaluationResults:
    """Everything :func:`psp_core.evaluation.evaluate_model` measured.

    ``sts`` maps year -> dataset -> correlation; ``missing`` names every expected dataset that
    was absent (and therefore not part of any mean). ``dev_sts`` is the STS file the model was
    selected on, relative to the evaluation directory (``sts17/en-en.tsv``); its row is marked
    dev and is in no mean. ``dev_unnamed`` says the model was selected on a dev file that the
    evaluation was not told about.
    """

    model: str = ""
    sts: dict[str, dict[str, Correlation]] = field(default_factory=dict)
    sts17: dict[str, Correlation] = field(default_factory=dict)
    stsb: dict[str, Correlation] = field(default_factory=dict)
    tatoeba: dict[str, TatoebaScore] = field(default_factory=dict)
    speed: SpeedResult | None = None
    missing: list[str] = field(default_factory=list)
    dev_sts: str | None = None
    dev_unnamed: bool = False

    @property
    def dev(self) -> DevDataset | None:
        """The dataset ``dev_sts`` names, if it is one of the evaluation directory's."""
        return dev_dataset(self.dev_sts)

    def is_dev(self, suite: str, name: str, year: str | None = None) -> bool:
        return self.dev == DevDataset(suite, name, year)

    @property
    def sts_years(self) -> dict[str, Correlation]:
        """Mean over each year's datasets, the dev set left out."""
        return sts_year_means(
            {
                year: {n: c for n, c in sets.items() if not self.is_dev("sts", n, year)}
                for year, sets in self.sts.items()
            }
        )

    @property
    def sts_mean(self) -> Correlation | None:
        """Mean over the years present (the paper's average is over 2012-2016, see
        :attr:`sts_coverage`)."""
        years = list(self.sts_years.values())
        return Correlation.mean(years) if years else None

    @property
    def sts_coverage(self) -> StsCoverage:
        """What :attr:`sts_mean` and each year's mean are over, next to the paper's."""
        return sts_coverage(self.sts, self.dev)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready: correlations as ``{"pearson", "spearman", "n"}``, each dataset's with
        ``"dev"`` (true for the dev set's)."""

        def corr(c: Correlation) -> dict[str, float]:
            return {"pearson": c.pearson, "spearman": c.spearman, "n": c.n}

        def dataset(c: Correlation, dev: bool) -> dict[str, Any]:
            return {**corr(c), "dev": dev}

        mean = self.sts_mean
        coverage = self.sts_coverage
        return {
            "model": self.model,
            "dev_sts": self.dev_sts,
            "dev_unnamed": self.dev_unnamed,
            "sts": {
                "datasets": {
                    y: {n: dataset(c, self.is_dev("sts", n, y)) for n, c in d.items()}
                    for y, d in self.sts.items()
                },
                "years": {y: corr(c) for y, c in self.sts_years.items()},
                "mean": corr(mean) if mean else None,
                "mean_over_years": list(coverage.years),
                "years_absent": list(coverage.years_absent),
                "datasets_absent": {y: list(n) for y, n in coverage.absent.items()},
                "datasets_extra": {y: list(n) for y, n in coverage.extra.items()},
                "mean_note": coverage.mean_note() if mean else None,
                "year_notes": {
                    y: coverage.year_note(y, detail=True)
                    for y in coverage.years
                    if coverage.year_note(y)
                },
            },
            "sts17": {n: dataset(c, self.is_dev("sts17", n)) for n, c in self.sts17.items()},
            "stsb": {n: dataset(c, self.is_dev("stsb", n)) for n, c in self.stsb.items()},
            "tatoeba": {lang: score.as_dict() for lang, score in self.tatoeba.items()},
            "speed": self.speed.as_dict() if self.speed else None,
            "missing": list(self.missing),
            "paper": {
                "sts_years": PAPER_STS_YEARS,
                "sts_mean": PAPER_STS_MEAN,
                "sts_mean_years": PAPER_STS_MEAN_YEARS,
                "sts_datasets": {y: list(n) for y, n in PAPER_STS_DATASETS.items()},
                "sts17": PAPER_STS17,
                "tatoeba": PAPER_TATOEBA,
                "speed_cpu_1_core": PAPER_SPEED_CPU,
            },
        }

    def _label(self, text: str, dev: bool) -> str:
        return f"{text} (dev)" if dev else text

    def _dev_legend(self) -> str | None:
        if self.dev_unnamed:
            return (
                "The model was selected on a dev STS file that this evaluation was not told "
                "about (dev_sts): one of the rows above may be it, and may be in a mean."
            )
        if self.dev_sts is None:
            return None
        dev = self.dev
        evaluated = dev is not None and (
            (dev.suite == "sts" and dev.name in self.sts.get(dev.year or "", {}))
            or (dev.suite == "sts17" and dev.name in self.sts17)
            or (dev.suite == "stsb" and dev.name in self.stsb)
        )
        if evaluated:
            return (
                f"(dev): {self.dev_sts}, the STS file the model was selected on; reported, "
                "in no mean."
            )
        return f"Dev set (model selection): {self.dev_sts}, not among the datasets evaluated here."

    def _sts_markdown(self) -> str:
        coverage = self.sts_coverage
        years = self.sts_years
        footnotes: list[str] = []

        def marker(note: str | None) -> str:
            if note is None:
                return ""
            footnotes.append(f"[{len(footnotes) + 1}] {note}")
            return f" [{len(footnotes)}]"

        rows = [
            "| STS | n | Pearson | Spearman | paper (Pearson) |",
            "|---|---:|---:|---:|---:|",
        ]
        for year, datasets in self.sts.items():
            for name, c in datasets.items():
                label = self._label(f"{year} {name}", self.is_dev("sts", name, year))
                rows.append(f"| {label} | {c.n} | {_fmt(c.pearson)} | {_fmt(c.spearman)} | |")
            if year not in years:  # only the dev set this year
                continue
            c = years[year]
            paper = PAPER_STS_YEARS.get(year)
            note = marker(coverage.year_footnote(year, c.pearson, paper))
            rows.append(
                f"| **{year} mean**{note} | {c.n} | **{_fmt(c.pearson)}** "
                f"| **{_fmt(c.spearman)}** | {_fmt(paper)} |"
            )
        mean = self.sts_mean
        if mean is not None:
            footnote = coverage.mean_footnote(mean.pearson, PAPER_STS_MEAN, PAPER_STS_MEAN_YEARS)
            label = f"STS {PAPER_STS_MEAN_YEARS} mean"
            if footnote:
                label += f", over {coverage.span}"
            rows.append(
                f"| **{label}**{marker(footnote)} | {mean.n} "
                f"| **{_fmt(mean.pearson)}** | **{_fmt(mean.spearman)}** "
                f"| {_fmt(PAPER_STS_MEAN)} ({PAPER_STS_MEAN_YEARS}) |"
            )
        return "\n".join(rows + ([""] + footnotes if footnotes else []))

    def to_markdown(self) -> str:
        """The results as markdown tables (Pearson/Spearman x 100, error rates in %)."""
        parts = []
        if self.sts:
            parts.append(self._sts_markdown())
        if self.sts17:
            languages = {t.name: f"{t.first_language}, {t.second_language}" for t in STS17_TRACKS}
            rows = [
                "| STS 2017 | columns | n | Pearson | Spearman | paper (Pearson) |",
                "|---|---|---:|---:|---:|---:|",
            ]
            for name, c in self.sts17.items():
                rows.append(
                    f"| {self._label(name, self.is_dev('sts17', name))} "
                    f"| {languages.get(name, '')} | {c.n} | {_fmt(c.pearson)} "
                    f"| {_fmt(c.spearman)} | {_fmt(PAPER_STS17.get(name))} |"
                )
            parts.append("\n".join(rows))
        if self.stsb:
            rows = ["| STS Benchmark | n | Pearson | Spearman |", "|---|---:|---:|---:|"]
            for name, c in self.stsb.items():
                # its dev split is development data whatever the model was selected on
                label = self._label(name, self.is_dev("stsb", name) or name == "dev")
                rows.append(f"| {label} | {c.n} | {_fmt(c.pearson)} | {_fmt(c.spearman)} |")
            parts.append("\n".join(rows))
        if self.tatoeba:
            rows = [
                "| Tatoeba error % | n | xx->en | en->xx | mean | margin xx->en | margin en->xx "
                "| margin mean | paper (mean) |",
                "|---|---:|---:|---:|---:|---:|---:|---:|---:|",
            ]
            for lang, s in self.tatoeba.items():
                rows.append(
                    f"| {lang} | {s.n} | {_fmt(s.cosine_xx_en)} | {_fmt(s.cosine_en_xx)} "
                    f"| **{_fmt(s.cosine_mean)}** | {_fmt(s.margin_xx_en)} | {_fmt(s.margin_en_xx)} "
                    f"| **{_fmt(s.margin_mean)}** | {_fmt(PAPER_TATOEBA.get(lang))} |"
                )
            parts.append("\n".join(rows))
        if self.speed:
            s = self.speed
            parts.append(
                "\n".join(
                    [
                        f"| speed ({s.sentences} sentences, batch {s.batch_size}, "
                        f"{s.torch_threads} torch threads) | sentences/s |",
                        "|---|---:|",
                        f"| with tokenization | {s.with_tokenization:,.0f} |",
                        f"| without tokenization | {s.without_tokenization:,.0f} |",
                        f"| paper, 1 CPU core | {PAPER_SPEED_CPU:,} |",
                    ]
                )
            )
        legend = self._dev_legend()
        if legend:
            parts.append(legend)
        if self.missing:
            parts.append("Missing (skipped): " + ", ".join(self.missing))
        return "\n\n".join(parts) + "\n"
