"""Semantic textual similarity: cosine of the two sentences' embeddings against gold scores.

The datasets and their layout under an evaluation directory (docs/evaluation.md):

* ``sts/YEAR/NAME.tsv``: SemEval STS 2012-2016 (English); Pearson and Spearman x 100 per
  dataset, averaged per year, then over the years, as the paper averages them.
* ``sts17/PAIR.tsv``: SemEval STS 2017 tracks, columns in the order :data:`STS17_TRACKS` gives.
* ``stsb/{train,dev,test}.tsv``: the STS Benchmark.

Every file is ``gold<TAB>sentence1<TAB>sentence2``. A dataset that is absent is reported by name
in the ``missing`` list the ``evaluate_*`` functions fill, and logged, never silently skipped.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from psp_core.inference.model import PSPModel


log = logging.getLogger(__name__)

#: The English STS test sets of each year (2013's SMT set is not public).
STS_YEAR_DATASETS: dict[str, tuple[str, ...]] = {
    "2012": ("MSRpar", "MSRvid", "OnWN", "SMTeuroparl", "SMTnews"),
    "2013": ("FNWN", "OnWN", "headlines"),
    "2014": ("OnWN", "deft-forum", "deft-news", "headlines", "images", "tweet-news"),
    "2015": ("answers-forums", "answers-students", "belief", "headlines", "images"),
    "2016": ("answer-answer", "headlines", "plagiarism", "postediting", "question-question"),
}


@dataclass(frozen=True)
class Sts17Track:
    """One STS 2017 track: the file name and the language of each sentence column."""

    name: str
    track: str
    first_language: str
    second_language: str


#: The STS 2017 tracks with each file's real column order (``ar-en``, ``tr-en`` and
#: ``es-en-wmt`` have English first; ``es-en``, track 4a, has Spanish first).
STS17_TRACKS: tuple[Sts17Track, ...] = (
    Sts17Track("ar-ar", "track1.ar-ar", "ar", "ar"),
    Sts17Track("ar-en", "track2.ar-en", "en", "ar"),
    Sts17Track("es-es", "track3.es-es", "es", "es"),
    Sts17Track("es-en", "track4a.es-en", "es", "en"),
    Sts17Track("es-en-wmt", "track4b.es-en", "en", "es"),
    Sts17Track("en-en", "track5.en-en", "en", "en"),
    Sts17Track("tr-en", "track6.tr-en", "en", "tr"),
)

#: the STS Benchmark splits evaluated: dev (development data: the promotion gate's dev suite)
#: and test; the train split is training data for supervised STS models, not a result
STSB_SPLITS = ("dev", "test")


@dataclass(frozen=True)
class Correlation:
    """Pearson and Spearman correlation x 100 of one dataset (or a mean of several)."""

    pearson: float
    spearman: float
    n: int

    @classmethod
    def mean(cls, items: list[Correlation]) -> Correlation:
        """Unweighted mean of the correlations; ``n`` is the total number of pairs."""
        return cls(
            float(np.mean([c.pearson for c in items])),
            float(np.mean([c.spearman for c in items])),
            sum(c.n for c in items),
        )


@dataclass(frozen=True)
class StsPairs:
    gold: np.ndarray
    first: list[str]
    second: list[str]


def read_sts_file(path: str | Path) -> StsPairs:
    """Read ``gold<TAB>sentence1<TAB>sentence2`` lines (an evaluation directory's STS files)."""
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
    """Spearman rank correlation (Pearson of average ranks); 0.0 when either side is constant."""
    return pearson(_ranks(x), _ranks(y))


def correlation(predicted: np.ndarray, gold: np.ndarray) -> Correlation:
    """Pearson and Spearman x 100 of predictions against gold scores."""
    if len(predicted) != len(gold):
        raise ValueError(f"{len(predicted)} predictions for {len(gold)} gold scores")
    return Correlation(
        100.0 * pearson(predicted, gold), 100.0 * spearman(predicted, gold), len(gold)
    )


def evaluate_sts_pairs(model: PSPModel, pairs: StsPairs, batch_size: int = 64) -> Correlation:
    """Cosine similarity of each pair under ``model`` correlated with the gold scores."""
    predicted = model.score(list(zip(pairs.first, pairs.second, strict=True)), batch_size)
    return correlation(predicted, pairs.gold)


def _evaluate_files(model, files: dict[str, Path], missing: list[str], label: str):
    results = {}
    for name, path in files.items():
        if not path.is_file():
            log.warning("%s: %s is missing; skipped", label, path)
            missing.append(f"{label} {name}")
            continue
        results[name] = evaluate_sts_pairs(model, read_sts_file(path))
    return results


def evaluate_sts_years(
    model: PSPModel, eval_dir: str | Path, missing: list[str], years: tuple[str, ...] | None = None
) -> dict[str, dict[str, Correlation]]:
    """STS 2012-2016 per year and dataset (``eval_dir/sts/YEAR/NAME.tsv``).

    The datasets of :data:`STS_YEAR_DATASETS` that are absent are appended to ``missing``; extra
    ``.tsv`` files in a year's folder are evaluated too (and logged).
    """
    root = Path(eval_dir) / "sts"
    results: dict[str, dict[str, Correlation]] = {}
    for year in years or tuple(STS_YEAR_DATASETS):
        files = {name: root / year / f"{name}.tsv" for name in STS_YEAR_DATASETS.get(year, ())}
        for extra in sorted((root / year).glob("*.tsv")):
            if extra.stem not in files:
                log.info("STS %s: evaluating extra dataset %s", year, extra)
                files[extra.stem] = extra
        per_dataset = _evaluate_files(model, files, missing, f"STS {year}")
        if per_dataset:
            results[year] = per_dataset
    return results


def sts_year_means(results: dict[str, dict[str, Correlation]]) -> dict[str, Correlation]:
    """Mean over each year's datasets."""
    return {year: Correlation.mean(list(sets.values())) for year, sets in results.items() if sets}


def evaluate_sts17(
    model: PSPModel, eval_dir: str | Path, missing: list[str], tracks: list[str] | None = None
) -> dict[str, Correlation]:
    """The STS 2017 tracks of :data:`STS17_TRACKS` (or the named ``tracks``) in ``eval_dir/sts17``."""
    known = {track.name for track in STS17_TRACKS}
    unknown = sorted(set(tracks or ()) - known)
    if unknown:
        raise ValueError(f"unknown STS 2017 tracks {unknown}; expected some of {sorted(known)}")
    root = Path(eval_dir) / "sts17"
    files = {
        track.name: root / f"{track.name}.tsv"
        for track in STS17_TRACKS
        if tracks is None or track.name in tracks
    }
    return _evaluate_files(model, files, missing, "STS17")


def evaluate_stsb(
    model: PSPModel, eval_dir: str | Path, missing: list[str]
) -> dict[str, Correlation]:
    """The STS Benchmark splits found in ``eval_dir/stsb``."""
    root = Path(eval_dir) / "stsb"
    files = {split: root / f"{split}.tsv" for split in STSB_SPLITS}
    return _evaluate_files(model, files, missing, "STSB")


class StsEvaluator:
    """Pearson r x 100 of a model on one STS file; usable as a training ``dev_evaluator``."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.pairs = read_sts_file(self.path)

    def __call__(self, model: PSPModel) -> float:
        predicted = model.score(list(zip(self.pairs.first, self.pairs.second, strict=True)))
        return 100.0 * pearson(predicted, self.pairs.gold)
