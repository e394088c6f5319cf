"""Evaluation results: each suite's result (:mod:`psp_core.evaluation.suite`), turned into a
JSON-ready dict and markdown tables with the paper's P-SP numbers beside ours
(docs/evaluation.md).

The dev set (the STS file the model was selected on) is reported, marked dev, and left out of
every mean; a mean over fewer datasets than the paper's carries a footnote naming what is
missing, next to the paper's number (:mod:`psp_core.evaluation.coverage`)."""

from __future__ import annotations

from typing import Any

from psp_core.evaluation.coverage import StsCoverage
from psp_core.evaluation.registry import dev_dataset, registered
from psp_core.evaluation.sts import Correlation
from psp_core.evaluation.suite import DevDataset


class EvaluationResults:
    """Everything :func:`psp_core.evaluation.evaluate_model` measured: ``results`` maps a suite's
    name to its result, also read and set as an attribute (``results.sts17``; a suite that did
    not run reads as its empty result).

    ``missing`` names every expected dataset that was absent (and therefore not part of any
    mean). ``dev_sts`` is the STS file the model was selected on, relative to the evaluation
    directory (``sts17/en-en.tsv``); its row is marked dev and is in no mean. ``dev_unnamed``
    says the model was selected on a dev file that the evaluation was not told about.
    """

    _FIELDS = ("model", "missing", "dev_sts", "dev_unnamed", "results")

    def __init__(
        self,
        model: str = "",
        *,
        missing: list[str] | None = None,
        dev_sts: str | None = None,
        dev_unnamed: bool = False,
        **suite_results: Any,
    ) -> None:
        self.model, self.dev_sts, self.dev_unnamed = model, dev_sts, dev_unnamed
        self.missing = list(missing or [])
        self.results: dict[str, Any] = {}
        for name, result in suite_results.items():
            setattr(self, name, result)

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_") or name in self._FIELDS:
            raise AttributeError(name)
        suites = registered()
        if name not in suites:
            raise AttributeError(f"{type(self).__name__} has no attribute or suite {name!r}")
        return self.results.get(name, suites[name].empty())

    def __setattr__(self, name: str, value: Any) -> None:
        if name in self._FIELDS:
            object.__setattr__(self, name, value)
        elif name in registered():
            self.results[name] = value
        else:
            raise AttributeError(
                f"no evaluation suite {name!r}; expected one of {list(registered())}"
            )

    def __repr__(self) -> str:
        return f"EvaluationResults(model={self.model!r}, suites={sorted(self.results)})"

    @property
    def dev(self) -> DevDataset | None:
        """The dataset ``dev_sts`` names, if it is one of the evaluation directory's."""
        return dev_dataset(self.dev_sts)

    def is_dev(self, suite: str, name: str, year: str | None = None) -> bool:
        return self.dev == DevDataset(suite, name, year)

    # the STS 2012-2016 suite's figures, as attributes (the paper's headline number)
    @property
    def sts_years(self) -> dict[str, Correlation]:
        """Mean over each year's datasets, the dev set left out."""
        from psp_core.evaluation.suites.sts_years import year_means

        return year_means(self.sts, self.dev)

    @property
    def sts_mean(self) -> Correlation | None:
        """Mean over the years present (the paper's average is over 2012-2016, see
        :attr:`sts_coverage`)."""
        from psp_core.evaluation.suites.sts_years import mean_of_years

        return mean_of_years(self.sts, self.dev)

    @property
    def sts_coverage(self) -> StsCoverage:
        """What :attr:`sts_mean` and each year's mean are over, next to the paper's."""
        from psp_core.evaluation.suites.sts_years import coverage

        return coverage(self.sts, self.dev)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready: one entry per suite (each its own shape; correlations as
        ``{"pearson", "spearman", "n"}``, each dataset's with ``"dev"``), what was missing,
        and the paper's numbers."""
        dev, suites = self.dev, registered()
        paper: dict[str, Any] = {}
        for each in suites.values():
            paper.update(each.paper)
        return {
            "model": self.model,
            "dev_sts": self.dev_sts,
            "dev_unnamed": self.dev_unnamed,
            **{
                name: each.to_dict(self.results.get(name, each.empty()), dev)
                for name, each in suites.items()
            },
            "missing": list(self.missing),
            "paper": paper,
        }

    def _dev_legend(self) -> str | None:
        if self.dev_unnamed:
            return (
                "The model was selected on a dev STS file that this evaluation was not told "
                "about (dev_sts): one of the rows above may be it, and may be in a mean."
            )
        if self.dev_sts is None:
            return None
        dev = self.dev
        owner = registered().get(dev.suite) if dev is not None else None
        if owner is not None and owner.evaluated(self.results.get(dev.suite, owner.empty()), dev):
            return (
                f"(dev): {self.dev_sts}, the STS file the model was selected on; reported, "
                "in no mean."
            )
        return f"Dev set (model selection): {self.dev_sts}, not among the datasets evaluated here."

    def to_markdown(self) -> str:
        """The results as markdown tables (Pearson/Spearman x 100, error rates in %)."""
        dev, parts = self.dev, []
        for name, each in registered().items():
            result = self.results.get(name)
            if result:
                text = each.markdown(result, dev)
                if text:
                    parts.append(text)
        legend = self._dev_legend()
        if legend:
            parts.append(legend)
        if self.missing:
            parts.append("Missing (skipped): " + ", ".join(self.missing))
        return "\n\n".join(parts) + "\n"
