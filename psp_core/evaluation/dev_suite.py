"""The development suite: the scores a new model version is compared on before it is promoted
(and the data defaults are chosen on). Development data only, never a test set
the README reports: STS 2017 en-en (the paper's dev set) and the STS Benchmark's dev split,
Pearson r x 100 each (higher is better), and for each language the retrieval error on its
held-back pairs (pairs set aside before the vocabulary and the model saw any of their
sentences, :mod:`ops.pairs.held_back`): the % of held-back sentences whose nearest sentence by cosine,
among the held-back translations and a pool of distractors (other pairs of the same corpus,
about ten times as many), is not their translation, the mean of both directions (lower is
better). The distractors make the score see a worse model: among the held-back translations
alone, a model gets nearly all right and the differences between models drown
(benchmarks/RESULTS.md#dev-retrieval)."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import pyarrow.parquet as pq

from psp_core.evaluation.registry import registered
from psp_core.evaluation.retrieval import error_rate

if TYPE_CHECKING:
    from psp_core.inference.model import PSPModel

log = logging.getLogger(__name__)

#: the name of a language's held-back retrieval error (lower is better)
HELD_BACK = "held_back_{lang}_error"


def dev_files() -> dict[str, str]:
    """Dev score name -> file under the evaluation directory: each suite's ``dev_files``
    (STS 2017 en-en and the STS Benchmark's dev split among the built-in ones)."""
    return {name: path for each in registered().values() for name, path in each.dev_files.items()}


def lower_is_better() -> frozenset[str]:
    """The dev scores that are better lower, by name: those of suites whose figures are error
    rates; a held-back retrieval error (:data:`HELD_BACK`) is too."""
    return frozenset(
        name
        for each in registered().values()
        if not each.higher_is_better
        for name in each.dev_files
    )


def is_lower_better(name: str) -> bool:
    return name in lower_is_better() or (name.startswith("held_back_") and name.endswith("_error"))


def retrieval_error(
    queries: np.ndarray, targets: np.ndarray, distractors: np.ndarray | None = None
) -> float:
    """% of ``queries`` whose nearest sentence by cosine among ``targets`` (row ``i`` the
    translation of query ``i``) and ``distractors`` is not their own translation."""
    from psp_core.bitext_mining.search import nearest_neighbours  # (torch: imported when used)

    if distractors is not None and len(distractors):
        targets = np.concatenate([targets, distractors])
    _, nearest = nearest_neighbours(queries, targets, 1)
    return error_rate(nearest[:, 0])


def both_ways_error(
    english: np.ndarray,
    other: np.ndarray,
    english_pool: np.ndarray | None = None,
    other_pool: np.ndarray | None = None,
) -> float:
    """The mean of both directions' :func:`retrieval_error` of aligned embeddings (row ``i`` of
    ``english`` and ``other`` translations), each side retrieved among the other side's rows
    and that side's pool of distractors."""
    to_english = retrieval_error(other, english, english_pool)
    to_other = retrieval_error(english, other, other_pool)
    return (to_english + to_other) / 2


def dev_suite_files(eval_dir: str | Path) -> dict[str, Path]:
    """The dev files present under ``eval_dir`` (an absent one is logged and left out)."""
    found = {}
    for name, relative in dev_files().items():
        path = Path(eval_dir) / relative
        if path.is_file():
            found[name] = path
        else:
            log.warning("dev suite: %s not found; %s left out", path, name)
    return found


def _sides(path: Path) -> tuple[list[str], list[str]]:
    table = pq.read_table(path, columns=["src", "tgt"])
    return table["src"].to_pylist(), table["tgt"].to_pylist()


class DevSuite:
    """The dev files present under ``eval_dir``, the held-back pairs of each language
    (``held_back``: language -> a pair file with ``src`` and ``tgt`` columns) and their
    distractors (``pools``: language -> a pair file; a language without one is scored among
    its held-back pairs alone), read once: a training scores every epoch on them."""

    def __init__(
        self,
        eval_dir: str | Path,
        held_back: dict[str, Path] | None = None,
        pools: dict[str, Path] | None = None,
    ) -> None:
        owners = {name: each for each in registered().values() for name in each.dev_files}
        self.sts = {
            name: owners[name].dev_scorer(path) for name, path in dev_suite_files(eval_dir).items()
        }
        self.pairs: dict[str, tuple[list[str], list[str]]] = {}
        self.pools: dict[str, tuple[list[str], list[str]]] = {}
        for lang, path in sorted((held_back or {}).items()):
            pairs = _sides(path)
            if len(pairs[0]) >= 2:  # (retrieval needs a second pair to confuse)
                self.pairs[lang] = pairs
                if (pools or {}).get(lang) is not None:
                    self.pools[lang] = _sides(pools[lang])

    def __bool__(self) -> bool:
        return bool(self.sts or self.pairs)

    def scores(self, model: PSPModel, digits: int | None = 2) -> dict[str, float]:
        """The model's score on each dev file (Pearson r x 100) and its retrieval error on
        each language's held-back pairs among them and its pool (``held_back_{lang}_error``,
        %, the mean of both directions), rounded to ``digits`` (None: not rounded)."""
        scores = {name: evaluate(model) for name, evaluate in self.sts.items()}
        for lang, (english, other) in self.pairs.items():
            pool_english, pool_other = self.pools.get(lang, ([], []))
            english = model.embed(english + pool_english, normalize=True)
            other = model.embed(other + pool_other, normalize=True)
            n = len(self.pairs[lang][0])
            error = both_ways_error(english[:n], other[:n], english[n:], other[n:])
            scores[HELD_BACK.format(lang=lang)] = error
        return {k: v if digits is None else round(v, digits) for k, v in scores.items()}


def dev_scores(
    model: PSPModel,
    eval_dir: str | Path,
    held_back: dict[str, Path] | None = None,
    pools: dict[str, Path] | None = None,
) -> dict[str, float]:
    """:meth:`DevSuite.scores` of the dev data under ``eval_dir``, ``held_back`` and
    ``pools``, rounded to 0.01 (a file of fewer than 2 held-back pairs gives no score)."""
    return DevSuite(eval_dir, held_back, pools).scores(model)


def dev_mean(scores: dict[str, float], digits: int | None = 2) -> float | None:
    """One number for a model's dev suite, higher is better: the mean of the suites' dev scores
    (STS 2017 en-en, STS-B dev; a suite's error rate as 100 minus it) and the languages' mean
    held-back retrieval accuracy (100 minus the error; a version scored before the errors were
    kept has the accuracy itself) (those present; None when none is), rounded to ``digits``
    (None: not rounded). Each language's pairs count once whatever their number,
    and all languages together as much as one STS set: the rule the multilingual defaults
    were decided by (benchmarks/RESULTS.md#multi-model)."""
    held = [
        100.0 - value if is_lower_better(name) else value
        for name, value in scores.items()
        if name.startswith("held_back_")
    ]
    lower = lower_is_better()
    parts = [
        100.0 - scores[name] if name in lower else scores[name]
        for name in dev_files()
        if name in scores
    ]
    if held:
        parts.append(sum(held) / len(held))
    if not parts:
        return None
    mean = sum(parts) / len(parts)
    return mean if digits is None else round(mean, digits)


class DevSuiteEvaluator:
    """A training's model selection on the dev suite: called with the model after each epoch,
    its :func:`dev_mean` (higher is better), from scores not rounded (epochs a rounding apart
    are not a tie: the first of a tie is kept). Logs the scores it is made of."""

    def __init__(
        self, eval_dir: str | Path, held_back: dict[str, Path], pools: dict[str, Path] | None = None
    ) -> None:
        self.suite = DevSuite(eval_dir, held_back, pools)
        if not self.suite:
            raise ValueError(
                f"no dev data: no dev STS file under {eval_dir}, no held-back pairs (of 2 or more)"
            )

    def __call__(self, model: PSPModel) -> float:
        scores = self.suite.scores(model, digits=None)
        mean = dev_mean(scores, digits=None)
        log.info("dev suite %s: dev mean %.3f", {k: round(v, 2) for k, v in scores.items()}, mean)
        return mean
