"""Run the evaluation suites of a model on an evaluation directory."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from psp_core.evaluation.results import EvaluationResults
from psp_core.evaluation.speed import measure_speed, speed_sentences
from psp_core.evaluation.sts import evaluate_sts17, evaluate_sts_years, evaluate_stsb
from psp_core.evaluation.tatoeba import evaluate_tatoeba

if TYPE_CHECKING:
    from psp_core.inference.model import PSPModel

log = logging.getLogger(__name__)

SUITES = ("sts", "sts17", "stsb", "tatoeba", "speed")
#: the files each suite reads, as glob patterns under the evaluation directory
SUITE_FILES = {
    "sts": ("sts/*/*.tsv",),
    "sts17": ("sts17/*.tsv",),
    "stsb": ("stsb/*.tsv",),
    "tatoeba": ("tatoeba/*-eng.eng",),
    "speed": ("sts/*/*.tsv", "sts17/*.tsv"),
}


def suites_with_data(eval_dir: str | Path, suites: Sequence[str] = SUITES) -> list[str]:
    """Those of ``suites`` that find at least one of their files under ``eval_dir``."""
    root = Path(eval_dir)
    return [s for s in suites if any(next(root.glob(p), None) for p in SUITE_FILES[s])]


def evaluate_model(
    model: PSPModel,
    eval_dir: str | Path,
    suites: Sequence[str] = SUITES,
    *,
    tatoeba_languages: list[str] | None = None,
    sts17_tracks: list[str] | None = None,
    speed_repeats: int = 3,
    model_name: str = "",
    dev_sts: str | Path | None = None,
) -> EvaluationResults:
    """Evaluate ``model`` on the datasets under ``eval_dir`` (docs/evaluation.md).

    Args:
        model: the model.
        eval_dir: directory with ``sts/``, ``sts17/``, ``stsb/``, ``tatoeba/``.
        suites: any of :data:`SUITES`.
        tatoeba_languages: LASER codes to evaluate (None: all present, paper's reported missing).
        sts17_tracks: STS 2017 track names (``es-en``, ...) to evaluate (None: all of them).
            :func:`psp_core.evaluation.plan_for_language` gives the paper's choice per language.
        speed_repeats: timed runs per speed figure (best is kept).
        model_name: recorded in the results.
        dev_sts: the STS file the model was selected on (the dev set: ``TrainingConfig.dev_sts``,
            ``psp train --dev-sts``), relative to ``eval_dir`` (``sts17/en-en.tsv``) or a path
            into it. Its row is marked dev and left out of every mean. Ignored, with a warning,
            for a model whose training summary has no best epoch (trained without selection).

    Absent datasets are named in ``results.missing`` and logged; they never fail the run.
    """
    unknown = [s for s in suites if s not in SUITES]
    if unknown:
        raise ValueError(f"unknown evaluation suites {unknown}; expected some of {list(SUITES)}")
    eval_dir = Path(eval_dir)
    if not eval_dir.is_dir():
        raise FileNotFoundError(f"evaluation directory {eval_dir} does not exist")
    results = EvaluationResults(model=model_name)
    results.dev_sts, results.dev_unnamed = _dev_set(model, eval_dir, dev_sts, model_name)
    if "sts" in suites:
        results.sts = evaluate_sts_years(model, eval_dir, results.missing)
    if "sts17" in suites:
        results.sts17 = evaluate_sts17(model, eval_dir, results.missing, sts17_tracks)
    if "stsb" in suites:
        results.stsb = evaluate_stsb(model, eval_dir, results.missing)
    if "tatoeba" in suites:
        results.tatoeba = evaluate_tatoeba(model, eval_dir, results.missing, tatoeba_languages)
    if "speed" in suites:
        sentences = speed_sentences(eval_dir)
        if sentences:
            results.speed = measure_speed(model, sentences, repeats=speed_repeats)
        else:
            log.warning("speed: no STS sentences under %s to time; skipped", eval_dir)
            results.missing.append("speed sentences (sts/, sts17/)")
    return results


def _dev_set(
    model: PSPModel, eval_dir: Path, dev_sts: str | Path | None, name: str
) -> tuple[str | None, bool]:
    """``(dev file relative to eval_dir, selected on an unnamed dev file)``, checked against
    the bundle's training summary: a model trained without selection has no dev set."""
    training = model.config.training or {}
    selected = training.get("best_epoch") is not None
    if dev_sts is None:
        if selected:
            log.warning(
                "model %s was selected on a dev STS file (best epoch %s) that was not named "
                "(dev_sts): its row cannot be marked dev or kept out of the means",
                name or "(unnamed)",
                training["best_epoch"],
            )
        return None, selected
    if "best_epoch" in training and not selected:
        log.warning(
            "model %s was trained without model selection (no best epoch in its training "
            "summary): dev_sts %s ignored",
            name or "(unnamed)",
            dev_sts,
        )
        return None, False
    path = Path(dev_sts)
    if not path.is_absolute() and ((eval_dir / path).exists() or not path.exists()):
        return path.as_posix(), False  # relative to eval_dir, like TrainingConfig.dev_sts
    try:
        return path.resolve().relative_to(eval_dir.resolve()).as_posix(), False
    except ValueError:
        log.warning("dev STS file %s is not under %s: no row is marked dev", dev_sts, eval_dir)
        return path.as_posix(), False
