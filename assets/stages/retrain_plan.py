"""retrain_plan: whether the next model version continues the promoted one (``incremental``) or
is trained from scratch (``full``), and why; for an incremental retrain, the pairs it trains on.

The run config's ``retrain`` (``auto``, ``full`` or ``incremental``) asks; with ``auto`` the
rules, in order: no promoted version, or one that keeps no record of its training pairs ->
full; the newest version was an incremental one the gate refused -> full; the promoted version
ends ``full_every`` incremental versions in a row (the registry's ``[retrain]``) -> full; no
pair is new to it, or none of its pairs is left -> full; its vocabulary no longer fits the new pairs (:func:`vocabulary_fits`)
-> full; else incremental, from the promoted version (the **parent**).

An incremental plan writes ``incremental_pairs.parquet``: every deduplicated pair the parent's
lineage never trained on, and a seeded replay sample of the others, sized so that replayed
pairs make the registry's ``replay_share`` of the file (:mod:`ops.pairs.pair_lineage`). Every plan
writes ``train_pairs.npy``, the keys of the pairs the new version's lineage will have trained
on (the parent's and the new ones; for a full retrain every deduplicated pair), which the model
stage keeps in the version. The later stages follow the plan: ``sentencepiece_model`` copies
the parent's vocabulary, ``training_data`` packs the incremental pairs, ``psp_model`` starts
from the parent's weights.

What decides the plan (its fingerprint): the deduplicated pairs, the setting, the registry's
``[retrain]`` settings and the **candidate parent**: the promoted version, unless that version
was trained on these same deduplicated pairs, in which case the candidate it was planned with
(so that re-running unchanged inputs reuses every stage, whatever that version's mode).
"""

from __future__ import annotations

import shutil
import time
import zlib

from dagster import Failure, MetadataValue

from assets.framework.metadata import common_metadata
from assets.framework.records import RetrainPlanRecord, read_record
from assets.framework.stage import Manifest, StageInputMissing
from assets.framework.stage_asset import Plan, Report, StageRun, stage_asset
from assets.lifecycle.model_versions import model_registry
from assets.settings.config import RetrainConfig
from assets.settings.languages import MULTI
from ops.pairs.pair_lineage import (
    count_new_and_seen,
    merge_keys,
    split_new_and_seen,
    vocabulary_fit,
    write_pair_keys,
)
from psp_core.models.bundle import SPM_FILE, read_config
from psp_core.models.registry import ModelRegistry, RegistryError, Version, last_decision

CODE_VERSION = "1"
SETTINGS = ("auto", "full", "incremental")
KEYS = "train_pairs.npy"
PAIRS = "incremental_pairs.parquet"
#: the vocabulary no longer fits new pairs that its pieces cut into this many times more pieces
#: per word than the reference pairs (the held-back pairs of its time, as the parent version
#: records them; else the seen pairs), or whose share of unknown pieces is this much higher
#: (provisional: docs/lifecycle.md, "Incremental retraining")
MAX_PIECES_PER_WORD_RATIO = 1.3
MAX_UNKNOWN_SHARE_RISE = 0.05


def candidate_parent(registry: ModelRegistry, pairs_fingerprint: str) -> str | None:
    """The version an incremental retrain of these pairs would continue (module docstring)."""
    promoted = registry.promoted()
    if promoted is None:
        return None
    lineage = promoted.info.get("lineage") or {}
    if lineage.get("deduplicated_pairs") == pairs_fingerprint:
        return lineage.get("retrain_candidate")
    return promoted.id


def incremental_streak(registry: ModelRegistry, version: Version) -> int:
    """Incremental versions in a row ending with ``version``, along the parent chain."""
    streak = 0
    while version is not None and (version.retrain or {}).get("mode") == "incremental":
        streak += 1
        version = _version(registry, version.retrain.get("parent"))  # (pruned: the chain ends)
    return streak


def rule_before_data(
    setting: str, registry: ModelRegistry, parent: Version | None, full_every: int
) -> tuple[str, str] | None:
    """``(rule, reason)`` of a full retrain decided without reading the pairs, or None."""
    if parent is None:
        if registry.promoted() is not None:
            return "same_pairs", "the promoted version was trained on these same pairs"
        return "no_promoted", "no promoted version: trained from scratch"
    if setting == "full":
        return "asked", "retrain: full was asked for"
    if parent.train_pairs is None:
        return "no_record", f"the promoted version {parent.id} keeps no record of its pairs"
    if setting == "incremental":
        return None
    versions = registry.versions()
    newest = versions[-1] if versions else None
    if newest is not None and (newest.retrain or {}).get("mode") == "incremental":
        decided = last_decision(registry.history(), newest.id) or {}
        if decided.get("action") == "reject":
            return "refused", f"the gate refused the last incremental version {newest.id}"
    streak = incremental_streak(registry, parent)
    if streak >= full_every:
        return "full_every", (
            f"{streak} incremental versions in a row end with {parent.id} (full_every {full_every})"
        )
    return None


def _version(registry: ModelRegistry, version_id: str | None) -> Version | None:
    """The version ``version_id``; None for none, or one removed by hand or by pruning."""
    try:
        return registry.version(version_id) if version_id else None
    except RegistryError:
        return None


def vocabulary_fits(fit_new: dict, fit_reference: dict) -> bool:
    """Whether the vocabulary cuts the new pairs about as well as the reference pairs."""
    ratio = fit_new["pieces_per_word"] / max(fit_reference["pieces_per_word"], 1e-9)
    rise = fit_new["unknown_share"] - fit_reference["unknown_share"]
    return ratio <= MAX_PIECES_PER_WORD_RATIO and rise <= MAX_UNKNOWN_SHARE_RISE


def plan(run: StageRun) -> Plan:
    """The deduplicated pairs, the setting, the ``[retrain]`` settings, the candidate parent.

    Raises:
        Failure: ``retrain`` is not one of :data:`SETTINGS`.
    """
    setting = run.config.retrain
    if setting not in SETTINGS:
        raise Failure(f"retrain_plan: retrain must be one of {list(SETTINGS)}, got {setting!r}")
    pairs = run.inputs.deduplicated_pairs
    registry = model_registry(run.storage, run.spec.code)
    candidate = candidate_parent(registry, pairs.fingerprint)
    settings = run.spec.retrain.plan_settings()

    def compute() -> tuple[dict, dict]:
        started = time.perf_counter()
        parent = _version(registry, candidate)
        decided = rule_before_data(setting, registry, parent, settings["full_every"])
        record = {"upstream": pairs.fingerprint, "candidate": candidate, "setting": setting}
        if decided is None:
            outputs, more = _incremental(
                run, pairs, parent, settings["replay_share"], check_fit=setting == "auto"
            )
        else:
            outputs, more = _full(run, pairs, *decided)
        record |= more
        if record["mode"] == "full" and settings.get("init_from") == MULTI:
            record |= multi_start(run)
        start = f"; {record['init_from_reason']}" if "init_from_reason" in record else ""
        run.context.log.info("retrain: %s (%s%s)", record["mode"], record["reason"], start)
        record["seconds"] = round(time.perf_counter() - started, 3)
        return outputs, RetrainPlanRecord(**record).as_dict()

    key = {"upstream": pairs.fingerprint, "retrain": setting, "candidate": candidate}
    return Plan(key | {"settings": settings}, compute)


def multi_start(run: StageRun) -> dict:
    """Where a full retrain of a language's model starts when its registry says ``init_from =
    "multi"``: ``{"init_from": id}`` of the promoted multilingual version, its reason appended
    to the plan's; where there is none, or it cuts text another way (its pre-tokenizer), only
    a reason: the retrain starts from random weights."""
    multi = model_registry(run.storage, MULTI).promoted()
    if multi is None:
        return {"init_from_reason": "no promoted multilingual model: from random weights"}
    pretokenizer = read_config(multi.bundle).pretokenizer
    if pretokenizer != run.spec.pretokenizer:
        return {
            "init_from_reason": f"the multilingual model {multi.id} pre-tokenizes with "
            f"{pretokenizer}, this language with {run.spec.pretokenizer}: from random weights"
        }
    return {
        "init_from": multi.id,
        "init_from_reason": f"from the multilingual model {multi.id}'s weights and vocabulary",
    }


def _full(run: StageRun, pairs: Manifest, rule: str, reason: str, record: dict | None = None):
    """The outputs and record of a full retrain's plan: the keys of every pair."""
    run.stage.path(PAIRS).unlink(missing_ok=True)  # an earlier incremental plan's
    n = write_pair_keys(pairs.output("pairs"), run.stage.path(KEYS))
    record = dict(record or {})
    record |= {"mode": "full", "parent": None, "rule": rule, "reason": reason}
    record |= {"new_pairs": n, "replay_pairs": 0, "lineage_pairs": n}
    return {"train_keys": KEYS}, record


def _incremental(
    run: StageRun, pairs: Manifest, parent: Version, replay_share: float, *, check_fit: bool
):
    """The outputs and record of a plan whose full-retrain rules did not fire: incremental,
    unless no pair is new, or (``check_fit``: ``auto``) the vocabulary no longer fits (then
    full). The fit is recorded either way."""
    source, stage = pairs.output("pairs"), run.stage
    n_new, n_seen, new_text, seen_text = count_new_and_seen(source, parent.train_pairs)
    record: dict = {"seen_pairs": n_seen}
    if n_new and n_seen:
        spm = parent.bundle / SPM_FILE
        reference = parent.info.get("vocabulary_fit") or (
            vocabulary_fit(spm, seen_text).as_dict() | {"pairs": "seen"}
        )
        fit = {"new": vocabulary_fit(spm, new_text).as_dict(), "reference": reference}
        record["vocabulary_fit"] = fit
    if not n_new:
        return _full(
            run,
            pairs,
            "no_new_pairs",
            f"no pair is new to the promoted version {parent.id}",
            record,
        )
    if not n_seen:
        return _full(
            run, pairs, "no_seen_pairs", f"none of the pairs of {parent.id} is left", record
        )
    if check_fit and "vocabulary_fit" in record and not vocabulary_fits(**_fits(record)):
        return _full(
            run, pairs, "vocabulary", _unfit_reason(parent, record["vocabulary_fit"]), record
        )
    wanted = round(n_new * replay_share / (1.0 - replay_share))
    split, new_keys = split_new_and_seen(
        source,
        parent.train_pairs,
        stage.path(PAIRS),
        replay_pairs=wanted,
        n_seen=n_seen,
        seed=zlib.crc32(parent.id.encode()),  # another replay sample for each parent
    )
    lineage = merge_keys(parent.train_pairs, new_keys, stage.path(KEYS))
    reason = (
        f"continued {parent.id} on {split.new_pairs} new pairs and {split.replay_pairs} "
        "replayed ones, with its vocabulary"
    )
    record |= {"mode": "incremental", "parent": parent.id, "rule": "incremental"}
    record |= {"reason": reason, "new_pairs": split.new_pairs}
    record |= {"replay_pairs": split.replay_pairs, "lineage_pairs": lineage}
    return {"train_keys": KEYS, "pairs": PAIRS}, record


def _fits(record: dict) -> dict:
    fit = record["vocabulary_fit"]
    return {"fit_new": fit["new"], "fit_reference": fit["reference"]}


def _unfit_reason(parent: Version, fit: dict) -> str:
    new, reference = fit["new"], fit["reference"]
    return (
        f"the vocabulary of {parent.id} no longer fits the new pairs: "
        f"{new['pieces_per_word']:.2f} pieces per word against {reference['pieces_per_word']:.2f}"
        f" ({reference['pairs']} pairs), {new['unknown_share']:.1%} unknown pieces against "
        f"{reference['unknown_share']:.1%} "
        f"(limits: x{MAX_PIECES_PER_WORD_RATIO}, +{MAX_UNKNOWN_SHARE_RISE:.0%})"
    )


def current_plan(run: StageRun) -> Manifest | None:
    """The language's retrain plan if it was made for today's deduplicated pairs; None where
    there is none (the multilingual chain, a stage materialized without it): a full retrain."""
    try:
        planned = run.inputs.retrain_plan
    except StageInputMissing:
        return None
    if (
        read_record(planned, RetrainPlanRecord).upstream
        != run.inputs.deduplicated_pairs.fingerprint
    ):
        return None
    return planned


def is_incremental(plan: Manifest | None) -> bool:
    """Whether ``plan`` (:func:`current_plan`'s) is an incremental retrain."""
    return plan is not None and read_record(plan, RetrainPlanRecord).incremental


def starting_version(plan: Manifest | None, code: str) -> tuple[str, str] | None:
    """The version whose weights and vocabulary a retrain of ``code``'s model starts from, as
    (its registry's code, its id): an incremental retrain's parent, or the multilingual version
    a full retrain starts from (``init_from``); None: random weights and a vocabulary of its
    own."""
    record = read_record(plan, RetrainPlanRecord) if plan is not None else None
    if record is not None and record.incremental:
        return code, record.parent
    if record is not None and record.init_from:
        return MULTI, record.init_from
    return None


def copy_parent_vocabulary(registry: ModelRegistry, parent: str, output) -> None:
    """Copy the parent version's sentencepiece model to ``output`` (temporary name, renamed).

    Raises:
        Failure: the parent version was removed since the plan was made.
    """
    version = _version(registry, parent)
    if version is None:
        raise Failure(
            f"version {parent}, which the incremental retrain continues, was removed; "
            "run retrain_plan with retrain: full"
        )
    tmp = output.with_name(f".{output.name}.tmp-copy")
    shutil.copyfile(version.bundle / SPM_FILE, tmp)
    tmp.replace(output)


def report(run: StageRun, plan: Plan, manifest: Manifest) -> Report:
    """The mode, the parent, why; the new, replayed and seen pairs; the vocabulary's fit."""
    record = read_record(manifest, RetrainPlanRecord)
    metadata = common_metadata(manifest, "train_keys")
    metadata |= {
        "retrain_mode": MetadataValue.text(record.mode),
        "retrain_parent": MetadataValue.text(record.parent or "none"),
        "retrain_reason": MetadataValue.text(record.reason),
        "new_pairs": MetadataValue.int(int(record.new_pairs)),
        "replay_pairs": MetadataValue.int(int(record.replay_pairs)),
        "lineage_pairs": MetadataValue.int(int(record.lineage_pairs)),
    }
    if record.vocabulary_fit is not None:
        metadata["vocabulary_fit"] = MetadataValue.json(record.vocabulary_fit)
    if record.init_from_reason is not None:
        metadata["init_from"] = MetadataValue.text(record.init_from_reason)
    return Report(metadata)


retrain_plan = stage_asset(
    name="retrain_plan",
    description="Decide how the next model version is trained (incremental from the promoted "
    "version, or full) and why; select an incremental retrain's new and replayed pairs.",
    code_version=CODE_VERSION,
    config=RetrainConfig,
    inputs=("deduplicated_pairs",),
    kinds={"parquet"},
    loggers=("ops",),
    plan=plan,
    report=report,
)
