"""The development suite: the scores a new model version is compared on before it is promoted
(and the data defaults are chosen on). Development data only, never a test set
the README reports: STS 2017 en-en (the paper's dev set) and the STS Benchmark's dev split,
Pearson r x 100 each, and for each language the retrieval accuracy on its held-back pairs
(pairs set aside before the vocabulary and the model saw any of their sentences,
:mod:`ops.held_back`): 100 minus the nearest-neighbour error by cosine, the mean of both
directions, as Tatoeba's. Every score is higher-is-better."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import TYPE_CHECKING

import pyarrow.parquet as pq

from psp_core.evaluation.sts import StsEvaluator
from psp_core.evaluation.tatoeba import tatoeba_errors

if TYPE_CHECKING:
    from psp_core.inference.model import PSPModel

log = logging.getLogger(__name__)

#: dev score name -> file under the evaluation directory
DEV_FILES = {"sts17_en_en": "sts17/en-en.tsv", "stsb_dev": "stsb/dev.tsv"}


def dev_suite_files(eval_dir: str | Path) -> dict[str, Path]:
    """The dev files present under ``eval_dir`` (an absent one is logged and left out)."""
    found = {}
    for name, relative in DEV_FILES.items():
        path = Path(eval_dir) / relative
        if path.is_file():
            found[name] = path
        else:
            log.warning("dev suite: %s not found; %s left out", path, name)
    return found


class DevSuite:
    """The dev files present under ``eval_dir`` and the held-back pairs of each language
    (``held_back``: language -> a pair file with ``src`` and ``tgt`` columns), read once: a
    training scores every epoch on them."""

    def __init__(self, eval_dir: str | Path, held_back: dict[str, Path] | None = None) -> None:
        self.sts = {name: StsEvaluator(path) for name, path in dev_suite_files(eval_dir).items()}
        self.pairs: dict[str, tuple[list[str], list[str]]] = {}
        for lang, path in sorted((held_back or {}).items()):
            table = pq.read_table(path, columns=["src", "tgt"])
            if table.num_rows >= 2:  # (retrieval needs a second pair to confuse)
                self.pairs[lang] = (table["src"].to_pylist(), table["tgt"].to_pylist())

    def __bool__(self) -> bool:
        return bool(self.sts or self.pairs)

    def scores(self, model: PSPModel, digits: int | None = 2) -> dict[str, float]:
        """The model's score on each dev file (Pearson r x 100) and on each language's
        held-back pairs (``held_back_{lang}``: 100 minus the retrieval error by cosine, the
        mean of both directions), rounded to ``digits`` (None: not rounded)."""
        scores = {name: evaluate(model) for name, evaluate in self.sts.items()}
        for lang, (english, other) in self.pairs.items():
            errors = tatoeba_errors(
                model.embed(other, normalize=True), model.embed(english, normalize=True)
            )
            scores[f"held_back_{lang}"] = 100.0 - errors.cosine_mean
        return {k: v if digits is None else round(v, digits) for k, v in scores.items()}


def dev_scores(
    model: PSPModel, eval_dir: str | Path, held_back: dict[str, Path] | None = None
) -> dict[str, float]:
    """:meth:`DevSuite.scores` of the dev data under ``eval_dir`` and ``held_back``, rounded
    to 0.01 (a file of fewer than 2 held-back pairs gives no score)."""
    return DevSuite(eval_dir, held_back).scores(model)


def dev_mean(scores: dict[str, float], digits: int | None = 2) -> float | None:
    """One number for a model's dev suite: the mean of STS 2017 en-en, STS-B dev and the
    languages' mean held-back accuracy (those present; None when none is), rounded to
    ``digits`` (None: not rounded). Each language's pairs count once whatever their number,
    and all languages together as much as one STS set: the rule the multilingual defaults
    were decided by (benchmarks/RESULTS.md#multi-model)."""
    held = [value for name, value in scores.items() if name.startswith("held_back_")]
    parts = [scores[name] for name in DEV_FILES if name in scores]
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

    def __init__(self, eval_dir: str | Path, held_back: dict[str, Path]) -> None:
        self.suite = DevSuite(eval_dir, held_back)
        if not self.suite:
            raise ValueError(
                f"no dev data: no dev STS file under {eval_dir}, no held-back pairs (of 2 or more)"
            )

    def __call__(self, model: PSPModel) -> float:
        scores = self.suite.scores(model, digits=None)
        mean = dev_mean(scores, digits=None)
        log.info("dev suite %s: dev mean %.3f", {k: round(v, 2) for k, v in scores.items()}, mean)
        return mean
