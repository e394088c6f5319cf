"""The development suite: the scores a new model version is compared on before it is promoted
(and, per issue 29, the data defaults are chosen on). Development data only, never a test set
the README reports: STS 2017 en-en (the paper's dev set) and the STS Benchmark's dev split,
Pearson r x 100 each, and for each language the retrieval accuracy on its held-back pairs
(pairs set aside before the vocabulary and the model saw any of their sentences,
:mod:`ops.held_back`): 100 minus the nearest-neighbour error by cosine, the mean of both
directions, as Tatoeba's. Every score is higher-is-better."""

from __future__ import annotations

import logging
from pathlib import Path

import pyarrow.parquet as pq

from psp_core.evaluation.sts import StsEvaluator
from psp_core.evaluation.tatoeba import tatoeba_errors
from psp_core.model import PSPModel

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


def held_back_accuracy(model: PSPModel, pairs: str | Path) -> float | None:
    """100 minus the retrieval error (cosine, both directions' mean) of a held-back pair file
    (``src``, ``tgt`` columns); None for a file of fewer than 2 pairs."""
    table = pq.read_table(pairs, columns=["src", "tgt"])
    if table.num_rows < 2:
        return None
    english = model.embed(table.column("src").to_pylist(), normalize=True)
    other = model.embed(table.column("tgt").to_pylist(), normalize=True)
    return 100.0 - tatoeba_errors(other, english).cosine_mean


def dev_scores(
    model: PSPModel, eval_dir: str | Path, held_back: dict[str, Path] | None = None
) -> dict[str, float]:
    """The model's score on each dev file present (Pearson r x 100) and on each language's
    held-back pairs (``held_back_{lang}``: retrieval accuracy %), rounded to 0.01."""
    scores = {
        name: round(StsEvaluator(path)(model), 2)
        for name, path in dev_suite_files(eval_dir).items()
    }
    for lang, path in sorted((held_back or {}).items()):
        accuracy = held_back_accuracy(model, path)
        if accuracy is not None:
            scores[f"held_back_{lang}"] = round(accuracy, 2)
    return scores


def dev_mean(scores: dict[str, float], digits: int | None = 2) -> float | None:
    """One number for a model's dev suite: the mean of STS 2017 en-en, STS-B dev and the
    languages' mean held-back accuracy (those present; None when none is), rounded to
    ``digits`` (None: not rounded). Each language's pairs count once whatever their number,
    and all languages together as much as one STS set: the rule issue 29 part 4 decided the
    multilingual defaults by."""
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
    its :func:`dev_mean` (higher is better). Logs the scores it is made of."""

    def __init__(self, eval_dir: str | Path, held_back: dict[str, Path]) -> None:
        self.eval_dir, self.held_back = Path(eval_dir), dict(held_back)
        if not dev_suite_files(self.eval_dir) and not self.held_back:
            raise ValueError(f"no dev data: no dev STS file under {eval_dir}, no held-back pairs")

    def __call__(self, model: PSPModel) -> float:
        scores = dev_scores(model, self.eval_dir, self.held_back)
        # not rounded: epochs a rounding apart are not a tie (the first of a tie is kept)
        mean = dev_mean(scores, digits=None)
        if mean is None:
            raise ValueError("the dev suite gave no score (held-back files of fewer than 2 pairs)")
        log.info("dev suite %s: dev mean %.3f", scores, mean)
        return mean
