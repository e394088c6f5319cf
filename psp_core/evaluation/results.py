"""Evaluation results: a plain dataclass that turns into a JSON-ready dict and markdown tables,
with the paper's P-SP numbers beside ours (DESIGN section 6)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from psp_core.evaluation.speed import SpeedResult
from psp_core.evaluation.sts import STS17_TRACKS, Correlation, sts_year_means
from psp_core.evaluation.tatoeba import TatoebaScore

#: Wieting et al., "Paraphrastic Representations at Scale", P-SP (Pearson x 100).
PAPER_STS_YEARS = {"2012": 68.7, "2013": 64.7, "2014": 78.1, "2015": 81.4, "2016": 80.0}
PAPER_STS_MEAN = 74.6
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
    was absent (and therefore not part of any mean).
    """

    model: str = ""
    sts: dict[str, dict[str, Correlation]] = field(default_factory=dict)
    sts17: dict[str, Correlation] = field(default_factory=dict)
    stsb: dict[str, Correlation] = field(default_factory=dict)
    tatoeba: dict[str, TatoebaScore] = field(default_factory=dict)
    speed: SpeedResult | None = None
    missing: list[str] = field(default_factory=list)

    @property
    def sts_years(self) -> dict[str, Correlation]:
        return sts_year_means(self.sts)

    @property
    def sts_mean(self) -> Correlation | None:
        """Mean over the years present (the paper's average is over 2012-2016)."""
        years = list(self.sts_years.values())
        return Correlation.mean(years) if years else None

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready: correlations as ``{"pearson", "spearman", "n"}``."""

        def corr(c: Correlation) -> dict[str, float]:
            return {"pearson": c.pearson, "spearman": c.spearman, "n": c.n}

        mean = self.sts_mean
        return {
            "model": self.model,
            "sts": {
                "datasets": {y: {n: corr(c) for n, c in d.items()} for y, d in self.sts.items()},
                "years": {y: corr(c) for y, c in self.sts_years.items()},
                "mean": corr(mean) if mean else None,
                "mean_over_years": sorted(self.sts_years),
            },
            "sts17": {name: corr(c) for name, c in self.sts17.items()},
            "stsb": {name: corr(c) for name, c in self.stsb.items()},
            "tatoeba": {lang: score.as_dict() for lang, score in self.tatoeba.items()},
            "speed": self.speed.as_dict() if self.speed else None,
            "missing": list(self.missing),
            "paper": {
                "sts_years": PAPER_STS_YEARS,
                "sts_mean": PAPER_STS_MEAN,
                "sts17": PAPER_STS17,
                "tatoeba": PAPER_TATOEBA,
                "speed_cpu_1_core": PAPER_SPEED_CPU,
            },
        }

    def to_markdown(self) -> str:
        """The results as markdown tables (Pearson/Spearman x 100, error rates in %)."""
        parts = []
        if self.sts:
            rows = [
                "| STS | n | Pearson | Spearman | paper (Pearson) |",
                "|---|---:|---:|---:|---:|",
            ]
            for year, datasets in self.sts.items():
                for name, c in datasets.items():
                    rows.append(
                        f"| {year} {name} | {c.n} | {_fmt(c.pearson)} | {_fmt(c.spearman)} | |"
                    )
                c = self.sts_years[year]
                rows.append(
                    f"| **{year} mean** | {c.n} | **{_fmt(c.pearson)}** | **{_fmt(c.spearman)}** "
                    f"| {_fmt(PAPER_STS_YEARS.get(year))} |"
                )
            mean = self.sts_mean
            years = ", ".join(self.sts_years)
            rows.append(
                f"| **mean of years ({years})** | {mean.n} | **{_fmt(mean.pearson)}** "
                f"| **{_fmt(mean.spearman)}** | {_fmt(PAPER_STS_MEAN)} (2012-2016) |"
            )
            parts.append("\n".join(rows))
        if self.sts17:
            languages = {t.name: f"{t.first_language}, {t.second_language}" for t in STS17_TRACKS}
            rows = [
                "| STS 2017 | columns | n | Pearson | Spearman | paper (Pearson) |",
                "|---|---|---:|---:|---:|---:|",
            ]
            for name, c in self.sts17.items():
                rows.append(
                    f"| {name} | {languages.get(name, '')} | {c.n} | {_fmt(c.pearson)} "
                    f"| {_fmt(c.spearman)} | {_fmt(PAPER_STS17.get(name))} |"
                )
            parts.append("\n".join(rows))
        if self.stsb:
            rows = ["| STS Benchmark | n | Pearson | Spearman |", "|---|---:|---:|---:|"]
            for name, c in self.stsb.items():
                rows.append(f"| {name} | {c.n} | {_fmt(c.pearson)} | {_fmt(c.spearman)} |")
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
        if self.missing:
            parts.append("Missing (skipped): " + ", ".join(self.missing))
        return "\n\n".join(parts) + "\n"
