"""Semantic textual similarity: cosine of the two sentences' embeddings against gold scores."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from psp_core.model import PSPModel


@dataclass(frozen=True)
class StsPairs:
    gold: np.ndarray
    first: list[str]
    second: list[str]


def read_sts_file(path: str | Path) -> StsPairs:
    """Read ``gold<TAB>sentence1<TAB>sentence2`` lines (the layout of ``shared/data/eval``)."""
    path = Path(path)
    gold, first, second = [], [], []
    with open(path, encoding="utf-8") as handle:
        for number, line in enumerate(handle, 1):
            fields = line.rstrip("\n").split("\t")
            if len(fields) != 3:
                raise ValueError(
                    f"{path}:{number}: expected gold<TAB>s1<TAB>s2, got {len(fields)} fields"
                )
            try:
                gold.append(float(fields[0]))
            except ValueError as error:
                raise ValueError(
                    f"{path}:{number}: gold score {fields[0]!r} is not a number"
                ) from error
            first.append(fields[1])
            second.append(fields[2])
    return StsPairs(np.asarray(gold, dtype=np.float64), first, second)


def pearson(x: np.ndarray, y: np.ndarray) -> float:
    """Pearson correlation; 0.0 (not NaN) when either side is constant."""
    x = np.asarray(x, dtype=np.float64) - np.mean(x)
    y = np.asarray(y, dtype=np.float64) - np.mean(y)
    denominator = np.sqrt((x * x).sum() * (y * y).sum())
    return float((x * y).sum() / denominator) if denominator > 0 else 0.0


def _ranks(values: np.ndarray) -> np.ndarray:
    """Average ranks (ties share the mean of their positions), like scipy's rankdata."""
    values = np.asarray(values, dtype=np.float64)
    order = np.argsort(values, kind="mergesort")
    sorted_values = values[order]
    boundaries = np.flatnonzero(np.diff(sorted_values)) + 1
    starts = np.concatenate([[0], boundaries])
    stops = np.concatenate([boundaries, [len(values)]])
    average = (starts + stops - 1) / 2.0
    ranks = np.empty(len(values))
    ranks[order] = np.repeat(average, stops - starts)
    return ranks


def spearman(x: np.ndarray, y: np.ndarray) -> float:
    return pearson(_ranks(x), _ranks(y))


class StsEvaluator:
    """Pearson r x 100 of a model on one STS file; usable as a training ``dev_evaluator``."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.pairs = read_sts_file(self.path)

    def __call__(self, model: PSPModel) -> float:
        predicted = model.score(list(zip(self.pairs.first, self.pairs.second, strict=True)))
        return 100.0 * pearson(predicted, self.pairs.gold)
