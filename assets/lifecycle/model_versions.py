"""A language's model versions in the pipeline: the registry under its ``psp_model`` folder
(:mod:`psp_core.models.registry`), the promotion gate run after each training, and the promoted model
every later stage reads (evaluation, exports, the scoreboard)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from dagster import MetadataValue

import psp_core  # its model (torch) is imported when a step loads one
from assets.framework.stage import Manifest, StageInputMissing, read_manifest
from assets.settings.languages import MULTI, PromotionSettings, load_registry
from assets.settings.resources import StorageResource
from psp_core.evaluation.dev_suite import dev_scores, is_lower_better
from psp_core.evaluation.gate import GateDecision, decide
from psp_core.evaluation.registry import dev_dataset, registered
from psp_core.models.bundle_config import BundleError
from psp_core.models.registry import (
    DamagedVersion,
    ModelRegistry,
    Version,
    last_decision,
    retrain_record,
)

MODEL_STAGE = "psp_model"


def model_registry(storage: StorageResource, code: str) -> ModelRegistry:
    return ModelRegistry(storage.stage_dir(code, MODEL_STAGE))


def version_manifest(version: Version) -> Manifest:
    """A version as the stage manifest later stages read (its id is its fingerprint there: two
    versions of the same inputs, a forced retrain, are two models)."""
    return Manifest(
        version.directory, version.id, {"bundle": "model"}, version.info.get("record", {})
    )


def promoted_model(storage: StorageResource, code: str) -> Manifest:
    """The promoted version of ``code``'s model.

    Raises:
        StageInputMissing: no version was promoted yet.
    """
    registry = model_registry(storage, code)
    version = registry.promoted()
    if version is None:
        raise StageInputMissing(
            f"{code!r} has no promoted model under {registry.root}; materialize psp_model "
            f"(partition {code}) first, or promote a version (psp models promote {code} ID)"
        )
    return version_manifest(version)


def test_scores_of(summary: dict) -> dict[str, float]:
    """The headline test-set scores of an evaluation summary (``results.json``): each suite's
    figures that are not development data (:meth:`psp_core.evaluation.suite.Suite.scores`: the
    STS mean, each STS 2017 track that is not the dev set, each language's retrieval error;
    STS-B's dev split is development data, its train split training data)."""
    dev = dev_dataset(summary.get("dev_sts"))
    return {
        score.key: score.value
        for name, each in registered().items()
        if summary.get(name)
        for score in each.scores(summary[name], dev)
        if not score.dev and score.value is not None
    }


@dataclass(frozen=True)
class DevPairs:
    """The dev suite's pairs of a model: each language's held-back pairs and its pool of
    distractors (deduplicated_pairs' ``dev_pairs`` and ``dev_pool``)."""

    held_back: dict[str, Path]
    pools: dict[str, Path]

    def scores(self, model: psp_core.PSPModel, eval_dir: Path) -> dict[str, float]:
        """The model's dev suite (:func:`~psp_core.evaluation.dev_suite.dev_scores`)."""
        return dev_scores(model, eval_dir, self.held_back, self.pools)


def dev_pairs(storage: StorageResource, code: str) -> DevPairs:
    """The dev suite's pairs for ``code``'s model: its language's, or for ``multi`` those of
    each of its languages."""
    return DevPairs(_dev_files(storage, code, "dev_pairs"), _dev_files(storage, code, "dev_pool"))


def _dev_files(storage: StorageResource, code: str, output: str) -> dict[str, Path]:
    codes = load_registry().multi_languages() if code == MULTI else [code]
    found = {}
    for lang in codes:
        manifest = read_manifest(storage.stage_dir(lang, "deduplicated_pairs"))
        if manifest is not None and output in manifest.outputs:
            path = manifest.output(output)
            if path.is_file():
                found[lang] = path
    return found


def run_gate(
    registry: ModelRegistry,
    version: Version,
    eval_dir: Path,
    settings: PromotionSettings,
    dev: DevPairs,
) -> tuple[GateDecision | None, str]:
    """Decide once whether ``version`` replaces the promoted version; returns the decision (None
    where it was decided before: a version rolled back by hand is not promoted again by the
    next run) and a line for the log. The promoted version is scored on today's dev files, the
    candidate was when it was written.

    A candidate whose bundle does not verify (the registry's check, as ``psp models promote``
    makes it) is not promoted, with the reason recorded; a promoted version that no longer
    loads is replaced by a candidate that does, whatever their scores."""
    promoted = registry.promoted()
    if promoted is not None and promoted.id == version.id:
        return None, f"version {version.id} is the promoted one"
    last = last_decision(registry.history(), version.id)
    if last is not None:
        return None, (
            f"version {version.id} was decided before ({last.get('action')}, {last.get('time')}:"
            f" {last.get('reason')}); the promoted version stays "
            f"{promoted.id if promoted else 'none'}"
        )
    try:
        registry.verify(version)
    except DamagedVersion as damaged:
        decision = GateDecision(False, str(damaged), version.dev_scores, None, settings.tolerance)
        registry.record_decision(version.id, reason=decision.reason)
        return decision, f"version {version.id} {decision.decision}: {decision.reason}"
    # the candidate's scores were taken when it was written, moments before (version.json)
    candidate = version.dev_scores or dev.scores(psp_core.load_model(version.bundle), eval_dir)
    incumbent, broken = None, None
    if promoted is not None:
        try:
            incumbent = dev.scores(psp_core.load_model(promoted.bundle), eval_dir)
        except BundleError as error:
            broken = f"the promoted version {promoted.id} no longer loads ({error}): replaced"
    decision = decide(candidate, incumbent, settings.tolerance)
    if broken is not None:
        decision = GateDecision(True, broken, candidate, None, settings.tolerance)
    scores = {"candidate": candidate, "incumbent": incumbent}
    if decision.promote:
        registry.promote(version.id, reason=decision.reason, scores=scores)
    else:
        registry.record_decision(version.id, reason=decision.reason, scores=scores)
    return decision, f"version {version.id} {decision.decision}: {decision.reason}"


def gate_metadata(
    decision: GateDecision | None,
    version: Version,
    registry: ModelRegistry,
    tolerance: float | None = None,
) -> dict[str, MetadataValue]:
    """The decision at a glance: this version, the promoted one, the decision with its reason
    and the dev scores side by side. A version decided by an earlier run (a reused re-run)
    shows that run's decision, reason and scores as the registry's history recorded them, with
    ``tolerance``, the registry's now."""
    promoted = registry.promoted()
    metadata = {
        "version": MetadataValue.text(version.id),
        "promoted_version": MetadataValue.text(promoted.id if promoted else "none"),
        "promotion": MetadataValue.text(
            decision.decision
            if decision
            else ("promoted" if promoted == version else "decided before")
        ),
    }
    if decision is not None:
        metadata["promotion_reason"] = MetadataValue.text(decision.reason)
        scores = {"candidate": decision.candidate, "incumbent": decision.incumbent}
        metadata["promotion_scores"] = _scores_table(scores, decision.tolerance)
        return metadata
    last = last_decision(registry.history(), version.id)
    if last is not None:  # (none for a bundle adopted from an earlier release)
        action = last.get("action", "")
        when = f" at {last['time']}" if last.get("time") else ""
        metadata["promotion_decided"] = MetadataValue.text(f"{action}{when}, by an earlier run")
        metadata["promotion_reason"] = MetadataValue.text(str(last.get("reason", "")))
        if last.get("scores"):
            metadata["promotion_scores"] = _scores_table(last["scores"], tolerance)
    return metadata


def full_retrain(
    promoted: Version | None,
    n_pairs: int,
    *,
    why: str | None = None,
    multi_start: str | None = None,
) -> dict:
    """The ``retrain`` entry of a version trained on every one of the ``n_pairs`` pairs of its
    training file, from scratch or (``multi_start``) from a multilingual version's weights and
    vocabulary: no parent (it continues no version of its own), every pair new to it. ``why``
    a full retrain rather than an incremental one (the retrain plan's reason), if said; the
    version promoted when it was trained, if any, is named in the reason: the one the gate
    compares it with."""
    start = "from scratch" if multi_start is None else f"from the multilingual model {multi_start}"
    if promoted is None:
        reason = f"no promoted version: trained {start}"
    else:
        why = why or "the pipeline's retrain"
        reason = (
            f"trained {start} on every pair ({why}); the promoted version {promoted.id} "
            "is what the gate compares it with"
        )
    return retrain_record("full", parent=None, new_pairs=n_pairs, replay_pairs=0, reason=reason)


def retrain_metadata(version: Version) -> dict[str, MetadataValue]:
    """How the version was trained, for the UI: mode, parent, new and replayed pairs, why;
    nothing for a version written before versions recorded it."""
    retrain = version.retrain
    if not retrain:
        return {}
    return {
        "retrain_mode": MetadataValue.text(str(retrain.get("mode"))),
        "retrain_parent": MetadataValue.text(retrain.get("parent") or "none"),
        "retrain_new_pairs": MetadataValue.int(int(retrain.get("new_pairs") or 0)),
        "retrain_replay_pairs": MetadataValue.int(int(retrain.get("replay_pairs") or 0)),
        "retrain_reason": MetadataValue.text(str(retrain.get("reason", ""))),
    }


def _scores_table(scores: dict, tolerance: float | None) -> MetadataValue:
    candidate, incumbent = scores.get("candidate") or {}, scores.get("incumbent") or {}
    rows = ["| dev score | better | this version | promoted before |", "|---|---|---:|---:|"]
    for name in sorted(set(candidate) | set(incumbent)):
        better = "lower (error %)" if is_lower_better(name) else "higher (x 100)"
        cells = f"{_cell(candidate.get(name))} | {_cell(incumbent.get(name))}"
        rows.append(f"| {name} | {better} | {cells} |")
    if tolerance is not None:
        rows.append(f"\nTolerance {tolerance} points (the registry's [promotion] table).")
    return MetadataValue.md("\n".join(rows))


def _cell(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"
