"""Run the evaluation suites of a model on an evaluation directory."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from psp_core.evaluation.registry import registered, suite_names
from psp_core.evaluation.results import EvaluationResults
from psp_core.evaluation.suite import SuiteRun

if TYPE_CHECKING:
    from psp_core.inference.model import PSPModel

log = logging.getLogger(__name__)


def suites_with_data(eval_dir: str | Path, suites: Sequence[str] | None = None) -> list[str]:
    """Those of ``suites`` (default: every registered one) that find at least one of their
    files under ``eval_dir``."""
    root, registry = Path(eval_dir), registered()
    names = suite_names() if suites is None else suites
    return [s for s in names if any(next(root.glob(p), None) for p in registry[s].files)]


def evaluate_model(
    model: PSPModel,
    eval_dir: str | Path,
    suites: Sequence[str] | None = None,
    *,
    speed_repeats: int = 3,
    model_name: str = "",
    dev_sts: str | Path | None = None,
    **subsets: Sequence[str] | None,
) -> EvaluationResults:
    """Evaluate ``model`` on the datasets under ``eval_dir`` (docs/evaluation.md).

    Args:
        model: the model.
        eval_dir: directory with each suite's files (``sts/``, ``sts17/``, ``stsb/``, ...).
        suites: names of registered suites (:func:`psp_core.evaluation.suite_names`; default:
            all), run in the registry's order.
        speed_repeats: timed runs per speed figure (best is kept).
        model_name: recorded in the results.
        dev_sts: the STS file the model was selected on (the dev set: ``TrainingConfig.dev_sts``,
            ``psp train --dev-sts``), relative to ``eval_dir`` (``sts17/en-en.tsv``) or a path
            into it. Its row is marked dev and left out of every mean. Ignored, with a warning,
            for a model whose training summary has no best epoch (trained without selection).
        **subsets: a suite's subsets by its ``subset_option`` (``sts17_tracks=["es-en"]``, the
            retrieval languages by their LASER codes, ...); None: the suite's default (all
            present). :func:`psp_core.evaluation.plan_for_language` gives the paper's choice.

    Absent datasets are named in ``results.missing`` and logged; they never fail the run.
    """
    registry = registered()
    suites = tuple(registry) if suites is None else tuple(suites)
    unknown = [s for s in suites if s not in registry]
    if unknown:
        raise ValueError(f"unknown evaluation suites {unknown}; expected some of {list(registry)}")
    by_option = {s.subset_option: s.name for s in registry.values() if s.subset_option}
    options = sorted(set(subsets) - set(by_option))
    if options:
        raise TypeError(
            f"evaluate_model() got unknown subsets {options}; expected {sorted(by_option)}"
        )
    wanted = {by_option[option]: chosen for option, chosen in subsets.items()}
    eval_dir = Path(eval_dir)
    if not eval_dir.is_dir():
        raise FileNotFoundError(f"evaluation directory {eval_dir} does not exist")
    results = EvaluationResults(model=model_name)
    results.dev_sts, results.dev_unnamed = _dev_set(model, eval_dir, dev_sts, model_name)
    for name, each in registry.items():
        if name in suites:
            run = SuiteRun(eval_dir, results.missing, wanted.get(name), results.dev,
                           {"speed_repeats": speed_repeats})  # fmt: skip
            results.results[name] = each.evaluate(model, run)
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
