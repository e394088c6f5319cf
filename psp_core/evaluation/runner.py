"""Run the evaluation suites of a model on an evaluation directory."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path

from psp_core.evaluation.results import EvaluationResults
from psp_core.evaluation.speed import measure_speed, speed_sentences
from psp_core.evaluation.sts import evaluate_sts17, evaluate_sts_years, evaluate_stsb
from psp_core.evaluation.tatoeba import evaluate_tatoeba
from psp_core.model import PSPModel

log = logging.getLogger(__name__)

SUITES = ("sts", "sts17", "stsb", "tatoeba", "speed")


def evaluate_model(
    model: PSPModel,
    eval_dir: str | Path,
    suites: Sequence[str] = SUITES,
    *,
    tatoeba_languages: list[str] | None = None,
    sts17_tracks: list[str] | None = None,
    speed_repeats: int = 3,
    model_name: str = "",
) -> EvaluationResults:
    """Evaluate ``model`` on the datasets under ``eval_dir`` (layout of ``shared/data/eval``).

    Args:
        model: the model.
        eval_dir: directory with ``sts/``, ``sts17/``, ``stsb/``, ``tatoeba/``.
        suites: any of :data:`SUITES`.
        tatoeba_languages: LASER codes to evaluate (None: all present, paper's reported missing).
        sts17_tracks: STS 2017 track names (``es-en``, ...) to evaluate (None: all of them).
            :func:`psp_core.evaluation.plan_for_language` gives the paper's choice per language.
        speed_repeats: timed runs per speed figure (best is kept).
        model_name: recorded in the results.

    Absent datasets are named in ``results.missing`` and logged; they never fail the run.
    """
    unknown = [s for s in suites if s not in SUITES]
    if unknown:
        raise ValueError(f"unknown evaluation suites {unknown}; expected some of {list(SUITES)}")
    eval_dir = Path(eval_dir)
    if not eval_dir.is_dir():
        raise FileNotFoundError(f"evaluation directory {eval_dir} does not exist")
    results = EvaluationResults(model=model_name)
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
