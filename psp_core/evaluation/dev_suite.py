"""The development suite: the scores a new model version is compared on before it is promoted
(and, per issue 29, the data defaults are chosen on). Development data only, never a test set
the README reports: STS 2017 en-en (the paper's dev set) and the STS Benchmark's dev split,
Pearson r x 100 each."""

from __future__ import annotations

import logging
from pathlib import Path

from psp_core.evaluation.sts import StsEvaluator
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


def dev_scores(model: PSPModel, eval_dir: str | Path) -> dict[str, float]:
    """The model's score on each dev file present (Pearson r x 100, rounded to 0.01)."""
    return {
        name: round(StsEvaluator(path)(model), 2)
        for name, path in dev_suite_files(eval_dir).items()
    }
