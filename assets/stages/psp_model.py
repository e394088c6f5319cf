"""psp_model: the trained model bundle (the paper's training, psp_core.train), with checks that
the bundle's vocabulary matches its sentencepiece model and that every weight is finite. An
incremental retrain (:mod:`assets.stages.retrain_plan`) starts from its parent version's weights."""

import json
import shutil
import time
from dataclasses import dataclass
from functools import partial
from pathlib import Path

import numpy as np
from dagster import AssetExecutionContext, Failure, MetadataValue

import psp_core  # its model and trainer (torch) are imported when a step runs
from assets.framework.catalog import MODEL_GROUP
from assets.framework.log_bridge import logs_to_dagster
from assets.framework.metadata import common_metadata, epochs_table, settings_table
from assets.framework.orphan_guard import stop_when_orphaned
from assets.framework.records import ModelRecord, RetrainPlanRecord, read_record
from assets.framework.slots import machine_slot
from assets.framework.stage import Manifest, Stage, fingerprint
from assets.framework.stage_asset import Check, CheckSpec, Plan, Report, StageRun, stage_asset
from assets.lifecycle.model_cards import card_facts, refresh_model_card, write_exports
from assets.lifecycle.model_versions import (
    DevPairs,
    dev_pairs,
    full_retrain,
    gate_metadata,
    model_registry,
    promoted_model,
    retrain_metadata,
    run_gate,
)
from assets.lifecycle.plots import LossCurve, chart_markdown
from assets.settings.config import TrainingConfig
from assets.settings.languages import LanguageSpec
from assets.settings.resources import ComputeResource, EvaluationDataResource, StorageResource
from assets.settings.training_settings import merge_training_settings
from assets.stages.retrain_plan import current_plan, is_incremental, starting_version
from ops.pairs.pair_lineage import reference_sentences, vocabulary_fit
from psp_core.evaluation import StsEvaluator
from psp_core.evaluation.dev_suite import DevSuiteEvaluator, dev_files
from psp_core.models.bundle import BundleError, load_bundle
from psp_core.models.export import FORMATS as EXPORT_FORMATS
from psp_core.models.registry import TRAIN_PAIRS, VERSIONS, Version, retrain_record
from psp_core.tokenization.tokenizer import make_pretokenizer, sha256_file
from psp_core.training import TrainConfig
from psp_core.training.init_from import InitFromMismatchError

CODE_VERSION = "2"  # (versions changed where, not what, it trains: same fingerprints)
VOCAB_CHECK = "model_vocab_matches_sentencepiece"
PROMOTED_CHECK = "model_promoted"


#: a warning, never blocking: the earlier model stays promoted and serves on
PROMOTED_CHECK_SPEC = CheckSpec(
    PROMOTED_CHECK,
    "The version this run trained (or reused) is the promoted model. A warning when the "
    "promotion gate kept the earlier version (a dev score more than the registry's tolerance "
    "below it): point alerting at this check to hear of a bad retrain.",
    blocking=False,
)


FINITE_CHECK = "model_weights_finite"
#: TrainConfig fields that do not change the trained weights.
_NOT_IN_FINGERPRINT = ("device", "num_threads", "log_every", "log_seconds", "checkpoint_every")


def loss_pictures(record: ModelRecord) -> dict[str, MetadataValue]:
    """The loss curve (mean loss per window of steps) and, with model selection, the dev score
    per epoch, each a picture short enough to show inline."""
    curve = record.loss_curve or [
        (h["steps"], h["loss"]) for h in record.history if h.get("loss") is not None
    ]
    pictures = {
        "loss_curve": MetadataValue.md(
            chart_markdown(
                curve,
                title="training loss (mean per window of steps)",
                x_label="step",
                alt="loss curve",
                x_start=1,
            )
        )
    }
    dev = [(h["epoch"] + 1, h["dev_score"]) for h in record.history if h.get("dev_score")]
    if len(dev) > 1:  # (one epoch's score is in the epochs table: a curve of one point is not)
        chart = chart_markdown(
            dev, title="dev STS (Pearson x 100)", x_label="epoch", alt="dev score", color="#d04a02"
        )
        pictures["dev_score_curve"] = MetadataValue.md(chart)
    return pictures


def check_bundle(bundle: Path, spm_path: Path) -> tuple[Check, Check]:
    """The two model checks: vocabulary consistency with the sentencepiece model, finiteness."""
    try:
        config, _, embeddings = load_bundle(bundle)  # validates sha256 and piece count itself
        problem = None
    except BundleError as err:
        config, embeddings, problem = None, None, str(err)
    spm_sha = sha256_file(spm_path)
    vocab_ok = problem is None and config.spm_sha256 == spm_sha
    vocab = Check(
        VOCAB_CHECK,
        passed=bool(vocab_ok),
        description=problem
        or (None if vocab_ok else f"bundle spm sha256 differs from {spm_path}'s"),
        metadata={
            "vocab_size": config.vocab_size if config else -1,
            "rows": int(embeddings.shape[0]) if embeddings is not None else -1,
        },
    )
    non_finite = int(np.size(embeddings) - np.isfinite(embeddings).sum()) if problem is None else -1
    finite = Check(FINITE_CHECK, passed=non_finite == 0, metadata={"non_finite_values": non_finite})
    return vocab, finite


#: the model selection of ``select_on_dev_suite`` (as recorded and fingerprinted)
DEV_SUITE_SELECTION = "dev suite mean"


def _model_selection(
    context: AssetExecutionContext,
    config: TrainingConfig,
    eval_dir: Path,
    dev: DevPairs,
) -> tuple[str | None, object | None]:
    """What picks the epoch kept (recorded and fingerprinted: the dev STS file, the dev suite,
    or None for the last epoch) and the evaluator that scores each epoch."""
    if config.select_on_dev_suite:
        try:
            return DEV_SUITE_SELECTION, DevSuiteEvaluator(eval_dir, dev.held_back, dev.pools)
        except ValueError as error:
            context.log.warning("%s: no model selection (the last epoch is kept)", error)
            return None, None
    dev_path = eval_dir / config.dev_sts if config.dev_sts else None
    if dev_path is not None and not dev_path.is_file():
        context.log.warning("dev STS file %s not found: no model selection", dev_path)
        return None, None
    return (str(config.dev_sts), StsEvaluator(dev_path)) if dev_path else (None, None)


@dataclass
class ModelTraining:
    """What one training of a language's model needs: its inputs (the upstream stages), its
    settings and their fingerprint, and where it reports."""

    context: AssetExecutionContext
    spec: LanguageSpec
    stage: Stage
    spm: Manifest
    data: Manifest
    train_config: TrainConfig
    settings: dict
    #: where each of ``settings`` was set (assets/settings/training_settings.py)
    settings_from: dict
    key: str
    selection: str | None
    dev_evaluator: object | None
    dev: DevPairs
    storage: StorageResource
    compute: ComputeResource
    eval_data: EvaluationDataResource
    #: the registry's promoted version when the training started (the gate's comparison)
    promoted_at_start: Version | None = None
    #: the language's retrain plan (None: a full retrain, the multilingual model's)
    retrain: Manifest | None = None
    #: the version whose weights the training starts from: the one an incremental retrain
    #: continues, or the multilingual version a full retrain starts from
    parent: Version | None = None

    @property
    def incremental(self) -> bool:
        return is_incremental(self.retrain)

    def train_version(self, bundle_path: Path) -> dict:
        """Train into ``bundle_path`` (a new version's folder) and return the version's record,
        lineage and dev scores. Holds a machine-wide training slot while it trains."""
        checkpoint = self.stage.path(f"checkpoint-{self.key}")
        started = time.perf_counter()
        with (
            stop_when_orphaned(self.context.log.error),
            machine_slot(
                Path(self.storage.root) / ".locks",
                "psp_training",
                self.compute.max_concurrent_trainings,
                on_wait=self.context.log.info,
            ),
        ):
            # A checkpoint is resumed only by a run with the same inputs and settings (a failed
            # or retried run picks up where it stopped); checkpoints of other settings are
            # stale. Removed only while holding the training slot: never under a live training.
            for stale in self.stage.directory.glob("checkpoint-*"):
                if stale != checkpoint:
                    shutil.rmtree(stale, ignore_errors=True)
            window = [time.time()]
            curve = LossCurve()
            result = self._train(bundle_path, checkpoint, curve)
            window.append(time.time())
        n_pairs = json.loads((result.bundle / "config.json").read_text())["training"]["data"]
        retrain = self._retrain_record(int(n_pairs["n_pairs"]))
        self.context.log.info("retrain: %s (%s)", retrain["mode"], retrain["reason"])
        lineage = {
            "sentencepiece_model": self.spm.fingerprint,
            "training_data": self.data.fingerprint,
        }
        if self.retrain is not None:  # what the next retrain tells new pairs by
            reference = self._vocabulary_reference()
            info_extra = {"vocabulary_fit": reference} if reference else {}
            shutil.copyfile(self.retrain.output("train_keys"), bundle_path.parent / TRAIN_PAIRS)
            lineage |= {
                "deduplicated_pairs": read_record(self.retrain, RetrainPlanRecord).upstream,
                "retrain_plan": self.retrain.fingerprint,
                "retrain_candidate": read_record(self.retrain, RetrainPlanRecord).candidate,
            }
        else:
            info_extra = {}
        return {
            **info_extra,
            "record": self._record(result, curve, window, time.perf_counter() - started),
            "retrain": retrain,
            "lineage": lineage,
            "dev_scores": self.dev.scores(
                psp_core.load_model(result.bundle), self.eval_data.path()
            ),
        }

    def _vocabulary_reference(self) -> dict | None:
        """The vocabulary's fit on held-back pairs of its time (text it never saw): what a
        later retrain compares new pairs with. An incremental version keeps its parent's
        vocabulary, and so its parent's reference."""
        if self.incremental and self.parent.info.get("vocabulary_fit"):
            return self.parent.info["vocabulary_fit"]
        sentences = reference_sentences(
            list(self.dev.held_back.values()), make_pretokenizer(self.spec.pretokenizer)
        )
        if not sentences:  # (no held-back pairs: a later retrain compares with seen pairs)
            return None
        fit = vocabulary_fit(self.spm.output("model"), sentences)
        return fit.as_dict() | {"pairs": "held_back"}

    def _retrain_record(self, n_pairs: int) -> dict:
        """The version's ``retrain`` entry: the plan's, for an incremental retrain; for a full
        one the plan's reason where it chose full over incremental, and the version the gate
        compares it with."""
        plan = (
            read_record(self.retrain, RetrainPlanRecord)
            if self.retrain is not None
            else RetrainPlanRecord()
        )
        if plan.incremental:
            return retrain_record(
                "incremental",
                parent=plan.parent,
                new_pairs=plan.new_pairs,
                replay_pairs=plan.replay_pairs,
                reason=plan.reason,
            )
        # (a plan reused from a run before the promoted version existed says nothing new)
        why = plan.reason if plan.rule not in (None, "no_promoted") else None
        start = self.parent.id if self.parent is not None else None
        return full_retrain(self.promoted_at_start, n_pairs, why=why, multi_start=start)

    def _train(self, bundle_path: Path, checkpoint: Path, curve: LossCurve):
        self.context.log.info(
            "training %s on %s: %s", self.spec.code, self.data.output("data"), self.settings
        )
        training = partial(
            psp_core.train,
            self.data.output("data"),
            self.spm.output("model"),
            bundle_path,
            self.train_config,
            dev_evaluator=self.dev_evaluator,
            checkpoint_dir=checkpoint,
            pretokenizer=self.spec.pretokenizer,
            on_step=curve,
            init_from=self.parent.bundle if self.parent is not None else None,
        )
        with logs_to_dagster(self.context.log):  # psp_core's resume and progress lines
            try:
                return training()
            except InitFromMismatchError as error:  # (the profile's dim changed, say)
                remedy = (
                    "run retrain_plan with retrain: full"
                    if self.incremental
                    else "remove init_from from the registry's [retrain] table"
                )
                raise Failure(f"{error}; or {remedy}") from error
            except (
                psp_core.training.CheckpointMismatchError,
                psp_core.training.CheckpointDamagedError,
            ) as error:
                # the directory is keyed by the inputs and settings, so only a file changed
                # in place, or a checkpoint none of whose steps reads back, gets here: its
                # work cannot be used
                self.context.log.warning("%s: starting the training over", error)
                return training(resume=False)

    def _record(self, result, curve: LossCurve, window: list[float], seconds: float) -> dict:
        bundle_config = json.loads((result.bundle / "config.json").read_text())
        selection = self.selection
        record = ModelRecord(
            history=result.state.history,
            steps=result.state.step,
            best_epoch=result.state.best_epoch,
            best_dev_score=result.state.best_score,
            best_epoch_unavailable=(bundle_config.get("training") or {}).get(
                "best_epoch_unavailable"
            ),
            # (the dev suite's STS 2017 track: the evaluation marks it dev, as STS-B's dev split)
            dev_sts=dev_files()["sts17_en_en"] if selection == DEV_SUITE_SELECTION else selection,
            model_selection=selection,
            dim=bundle_config["dim"],
            vocab_size=bundle_config["vocab_size"],
            settings=self.settings,
            settings_from=self.settings_from,
            seconds=round(seconds, 3),
            training_window=window,
            # mean loss per window of steps (of this run's steps: a resumed run starts later)
            loss_curve=curve.curve(),
        )
        return record.as_dict()


def plan_training(run: StageRun, profile_asset: str) -> tuple[ModelTraining, dict]:
    """The training the run's stage would run now: the profile's settings under the run's
    overrides, the model selection, and the fingerprint that decides whether it reruns (with
    the inputs it is the hash of)."""
    context, spec, config, stage = run.context, run.spec, run.config, run.stage
    storage = run.storage
    compute, eval_data = run.resource("compute"), run.resource("eval_data")
    spm = run.inputs.sentencepiece_model
    data = run.inputs.training_data
    retrain = current_plan(run)
    start = starting_version(retrain, spec.code)
    parent = None if start is None else model_registry(storage, start[0]).version(start[1])
    profile = run.resource("profile")
    merged = merge_training_settings(
        spec.training,
        spec.training_origins,
        (profile.label, profile.values(profile_asset)),
        {name: value for name, value in config.overrides().items() if value is not None},
        {"device": compute.device, "num_threads": compute.threads},
        spec.retrain.lr_scale if is_incremental(retrain) else None,
    )
    train_config = merged.config
    dev = dev_pairs(storage, spec.code)  # the dev suite's pairs of its language(s)
    selection, dev_evaluator = _model_selection(context, config, eval_data.path(), dev)
    settings = train_config.stage_settings(leave_out=_NOT_IN_FINGERPRINT)
    settings_from = {name: merged.origins[name] for name in settings}
    key = {
        "stage": stage.name,
        # this stage's code version also for the multilingual model (whose asset has its own)
        "code": CODE_VERSION,
        "spm": spm.fingerprint,
        "data": data.fingerprint,
        "settings": settings | TrainConfig.removed_in_fingerprints(),
        "pretokenizer": spec.pretokenizer,
        "dev": selection,
        # (a full retrain's key is as it was before incremental retrains existed)
        **({"init_from": parent.id} if parent is not None else {}),
    }
    job = ModelTraining(
        context,
        spec,
        stage,
        spm,
        data,
        train_config,
        settings,
        settings_from,
        fingerprint(**key),
        selection,
        dev_evaluator,
        dev,
        storage,
        compute,
        eval_data,
        retrain=retrain,
        parent=parent,
    )
    return job, key


def plan(run: StageRun, *, profile_asset: str = "psp_model") -> Plan:
    """A new version trained unless one was trained from the same inputs and settings (the
    multilingual model's with ``profile_asset="multi_psp_model"``).

    Raises:
        Failure: the config asks for an export format that does not exist.
    """
    unknown = sorted(set(run.config.exports) - set(EXPORT_FORMATS))
    if unknown:
        raise Failure(f"psp_model: exports {unknown} unknown; choose from {list(EXPORT_FORMATS)}")
    job, key = plan_training(run, profile_asset)
    registry = model_registry(run.storage, run.spec.code)

    def compute() -> tuple[dict, dict]:
        registry.adopt_legacy_bundle()  # a model of an earlier release becomes the first version
        version = None if run.config.force else registry.find(job.key)
        if version is not None:
            run.context.log.info(
                "version %s was trained from these inputs and settings: reusing it", version.id
            )
        else:
            job.promoted_at_start = registry.promoted()
            version = registry.add_version(job.key, job.train_version)
        return {"bundle": f"{VERSIONS}/{version.id}/model"}, {
            **version.info["record"],
            "version": version.id,
        }

    return Plan(key, compute, shows={"job": job, "registry": registry})


def report(run: StageRun, plan: Plan, manifest: Manifest) -> Report:
    """The promotion gate on the version, the exports of the promoted model, the training's
    metadata; the bundle's checks and whether the version is the promoted one."""
    job: ModelTraining = plan.shows["job"]
    registry = plan.shows["registry"]
    spec, log = run.spec, run.context.log
    record = read_record(manifest, ModelRecord)
    if not manifest.reused:
        # the card with the data funnel and the run (the evaluation adds its tables)
        refresh_model_card(manifest, card_facts(job.stage, spec.code, record))
    version = (
        registry.version(record.version)
        if record.version is not None
        else registry.promoted()  # a manifest of an earlier release: its adopted bundle
    )
    decision, line = run_gate(registry, version, job.eval_data.path(), spec.promotion, dev=job.dev)
    if decision is not None and not decision.promote:
        log.warning(line)
    else:
        log.info(line)
    removed = registry.prune(spec.promotion.keep_versions)
    if removed:
        log.info("removed versions beyond the newest %d: %s", spec.promotion.keep_versions, removed)
    promoted = promoted_model(run.storage, spec.code)
    exports = write_exports(promoted, run.config.exports)
    metadata = common_metadata(manifest, "bundle")
    metadata.update(gate_metadata(decision, version, registry, spec.promotion.tolerance))
    metadata.update(retrain_metadata(version))
    for format, directory in exports.items():
        metadata[f"export_{format}"] = MetadataValue.path(str(directory))
    metadata.update(training_metadata(record))
    promoted_check = Check(
        PROMOTED_CHECK,
        passed=promoted.fingerprint == version.id,
        warn=True,
        description=line,
        metadata={"version": version.id, "promoted_version": promoted.fingerprint},
    )
    bundle_checks = check_bundle(manifest.output("bundle"), job.spm.output("model"))
    return Report(metadata, [*bundle_checks, promoted_check])


psp_model = stage_asset(
    name="psp_model",
    description="""Train the P-SP model on the packed data; resumes from its checkpoint after a failure
    (one that no longer fits the training file is dropped with a warning). psp_core's log
    lines (resuming, loss and pairs/s) go to the run's log.""",
    code_version=CODE_VERSION,
    config=TrainingConfig,
    inputs=("retrain_plan", "sentencepiece_model", "training_data"),
    also_reads=("deduplicated_pairs",),  # (whether the retrain plan is today's)
    kinds={"pytorch"},
    resources=("compute", "eval_data", "profile"),
    checks=[
        CheckSpec(
            VOCAB_CHECK,
            "The bundle's embedding table has one row per piece of its sentencepiece model. "
            "Blocking: otherwise ids would index the wrong rows (or past the table).",
        ),
        CheckSpec(
            FINITE_CHECK,
            "Every weight is finite. Blocking: a NaN or inf row (a diverged run) makes the "
            "embeddings of every sentence with that piece NaN.",
        ),
        PROMOTED_CHECK_SPEC,
    ],
    group=MODEL_GROUP,
    # training logs its own lines (psp_core's, while it trains)
    loggers=(),
    pool="psp_training",
    plan=plan,
    report=report,
)


def dev_score_words(record: ModelRecord) -> str:
    """What the dev score that picked the epoch kept is, in a reader's words: its set, its
    scale and its direction."""
    if record.model_selection == DEV_SUITE_SELECTION:
        return (
            "the dev suite's mean, 0-100, higher is better: STS 2017 en-en and STS-B dev "
            "(Pearson x 100) with the held-back pairs' retrieval (100 minus the error %)"
        )
    where = record.model_selection or record.dev_sts or "the dev STS file"
    return f"Pearson x 100 on {where}, higher is better"


def training_metadata(record: ModelRecord) -> dict[str, MetadataValue]:
    """What the UI shows of a training: sizes, steps, the loss and dev-score pictures, the
    epochs table, the last epoch's loss and speed, the settings and when it ran."""
    history = record.history
    metadata = {
        "dim": MetadataValue.int(record.dim),
        "vocab_size": MetadataValue.int(record.vocab_size),
        "steps": MetadataValue.int(record.steps),
        **loss_pictures(record),
        "epochs": epochs_table(history),
        "last_epoch_mean_loss": MetadataValue.float(
            round(float(history[-1]["loss"] or 0.0), 4) if history else 0.0
        ),
        "pairs_per_second": MetadataValue.float(
            round(float(history[-1]["pairs_per_second"] or 0.0), 1) if history else 0.0
        ),
        "seconds": MetadataValue.float(round(float(record.seconds or 0.0), 1)),
        "settings": settings_table(record.settings, record.settings_from),
    }
    window = record.training_window
    if window:
        metadata["training_started"] = MetadataValue.timestamp(float(window[0]))
        metadata["training_ended"] = MetadataValue.timestamp(float(window[1]))
    if record.best_dev_score is not None:
        metadata["best_dev_score"] = MetadataValue.float(round(float(record.best_dev_score), 2))
        metadata["best_dev_score_is"] = MetadataValue.text(dev_score_words(record))
        # counted from 1, as the epochs table and chart count them
        metadata["best_epoch"] = MetadataValue.int(int(record.best_epoch) + 1)
    if record.best_epoch_unavailable:  # (the bundle holds the final epoch's weights)
        metadata["best_epoch_unavailable"] = MetadataValue.text(record.best_epoch_unavailable)
    return metadata
