"""psp_model: the trained model bundle (the paper's training, psp_core.train), with checks that
the bundle's vocabulary matches its sentencepiece model and that every weight is finite."""

import json
import shutil
import time
from dataclasses import dataclass
from functools import partial
from pathlib import Path

import numpy as np
from dagster import (
    AssetCheckResult,
    AssetCheckSeverity,
    AssetCheckSpec,
    AssetExecutionContext,
    DataVersion,
    Failure,
    MaterializeResult,
    MetadataValue,
    asset,
)

import psp_core  # its model and trainer (torch) are imported when a step runs
from assets.catalog import MODEL_GROUP, OWNERS
from assets.config import TrainingConfig, op_config, plain_schema
from assets.languages import LanguageSpec, load_registry
from assets.log_bridge import logs_to_dagster
from assets.metadata import common_metadata, epochs_table, settings_table
from assets.model_cards import card_facts, refresh_model_card, write_exports
from assets.model_versions import (
    gate_metadata,
    held_back_pairs,
    model_registry,
    promoted_model,
    run_gate,
)
from assets.orphan_guard import stop_when_orphaned
from assets.partitions import language_partitions
from assets.plots import LossCurve, chart_markdown
from assets.profiles import ProfileResource
from assets.resources import ComputeResource, EvaluationDataResource, StorageResource
from assets.slots import machine_slot
from assets.stage import Manifest, Stage, fingerprint
from psp_core.evaluation import StsEvaluator
from psp_core.evaluation.dev_suite import DEV_FILES, DevSuiteEvaluator, dev_scores
from psp_core.models.bundle import BundleError, load_bundle
from psp_core.models.export import FORMATS as EXPORT_FORMATS
from psp_core.models.registry import VERSIONS
from psp_core.tokenization.tokenizer import sha256_file
from psp_core.training import TrainConfig

CODE_VERSION = "2"  # (versions changed where, not what, it trains: same fingerprints)
VOCAB_CHECK = "model_vocab_matches_sentencepiece"
PROMOTED_CHECK = "model_promoted"


def promoted_check_spec(asset_name: str) -> AssetCheckSpec:
    return AssetCheckSpec(
        PROMOTED_CHECK,
        asset=asset_name,
        description="The version this run trained (or reused) is the promoted model. A warning "
        "when the promotion gate kept the earlier version (a dev score more than the registry's "
        "tolerance below it): point alerting at this check to hear of a bad retrain.",
    )


FINITE_CHECK = "model_weights_finite"
#: TrainConfig fields that do not change the trained weights.
_NOT_IN_FINGERPRINT = ("device", "num_threads", "log_every", "log_seconds", "checkpoint_every")


def loss_pictures(record: dict) -> dict[str, MetadataValue]:
    """The loss curve (mean loss per window of steps) and, with model selection, the dev score
    per epoch, each a picture short enough to show inline."""
    curve = record.get("loss_curve") or [
        (h["steps"], h["loss"]) for h in record["history"] if h.get("loss") is not None
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
    dev = [(h["epoch"] + 1, h["dev_score"]) for h in record["history"] if h.get("dev_score")]
    if len(dev) > 1:  # (one epoch's score is in the epochs table: a curve of one point is not)
        chart = chart_markdown(
            dev, title="dev STS (Pearson x 100)", x_label="epoch", alt="dev score", color="#d04a02"
        )
        pictures["dev_score_curve"] = MetadataValue.md(chart)
    return pictures


def check_bundle(bundle: Path, spm_path: Path) -> tuple[AssetCheckResult, AssetCheckResult]:
    """The two model checks: vocabulary consistency with the sentencepiece model, finiteness."""
    try:
        config, _, embeddings = load_bundle(bundle)  # validates sha256 and piece count itself
        problem = None
    except BundleError as err:
        config, embeddings, problem = None, None, str(err)
    spm_sha = sha256_file(spm_path)
    vocab_ok = problem is None and config.spm_sha256 == spm_sha
    vocab = AssetCheckResult(
        check_name=VOCAB_CHECK,
        passed=bool(vocab_ok),
        severity=AssetCheckSeverity.ERROR,
        description=problem
        or (None if vocab_ok else f"bundle spm sha256 differs from {spm_path}'s"),
        metadata={
            "vocab_size": config.vocab_size if config else -1,
            "rows": int(embeddings.shape[0]) if embeddings is not None else -1,
        },
    )
    non_finite = int(np.size(embeddings) - np.isfinite(embeddings).sum()) if problem is None else -1
    finite = AssetCheckResult(
        check_name=FINITE_CHECK,
        passed=non_finite == 0,
        severity=AssetCheckSeverity.ERROR,
        metadata={"non_finite_values": non_finite},
    )
    return vocab, finite


@asset(
    config_schema=plain_schema(TrainingConfig),
    partitions_def=language_partitions,
    group_name=MODEL_GROUP,
    owners=OWNERS,
    code_version=CODE_VERSION,
    deps=["sentencepiece_model", "training_data"],
    pool="psp_training",
    kinds={"pytorch"},
    check_specs=[
        AssetCheckSpec(
            VOCAB_CHECK,
            asset="psp_model",
            blocking=True,
            description="The bundle's embedding table has one row per piece of its sentencepiece "
            "model. Blocking: otherwise ids would index the wrong rows (or past the table).",
        ),
        AssetCheckSpec(
            FINITE_CHECK,
            asset="psp_model",
            blocking=True,
            description="Every weight is finite. Blocking: a NaN or inf row (a diverged run) "
            "makes the embeddings of every sentence with that piece NaN.",
        ),
        promoted_check_spec("psp_model"),
    ],
)
def psp_model(
    context: AssetExecutionContext,
    storage: StorageResource,
    compute: ComputeResource,
    eval_data: EvaluationDataResource,
    profile: ProfileResource,
) -> MaterializeResult:
    """Train the P-SP model on the packed data; resumes from its checkpoint after a failure
    (one that no longer fits the training file is dropped with a warning). psp_core's log
    lines (resuming, loss and pairs/s) go to the run's log."""
    config = op_config(context, TrainingConfig)
    spec = load_registry()[context.partition_key]
    return build_model(context, spec, config, storage, compute, eval_data, profile)


#: the model selection of ``select_on_dev_suite`` (as recorded and fingerprinted)
DEV_SUITE_SELECTION = "dev suite mean"


def _model_selection(
    context: AssetExecutionContext,
    config: TrainingConfig,
    eval_dir: Path,
    held_back: dict[str, Path],
) -> tuple[str | None, object | None]:
    """What picks the epoch kept (recorded and fingerprinted: the dev STS file, the dev suite,
    or None for the last epoch) and the evaluator that scores each epoch."""
    if config.select_on_dev_suite:
        try:
            return DEV_SUITE_SELECTION, DevSuiteEvaluator(eval_dir, held_back)
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
    key: str
    selection: str | None
    dev_evaluator: object | None
    held_back: dict[str, Path]
    storage: StorageResource
    compute: ComputeResource
    eval_data: EvaluationDataResource

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
        return {
            "record": self._record(result, curve, window, time.perf_counter() - started),
            "lineage": {
                "sentencepiece_model": self.spm.fingerprint,
                "training_data": self.data.fingerprint,
            },
            "dev_scores": dev_scores(
                psp_core.load_model(result.bundle), self.eval_data.path(), self.held_back
            ),
        }

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
        )
        with logs_to_dagster(self.context.log):  # psp_core's resume and progress lines
            try:
                return training()
            except psp_core.training.CheckpointMismatchError as error:
                # the directory is keyed by the inputs and settings, so only a file changed
                # in place (or a damaged checkpoint) gets here: its work cannot be used
                self.context.log.warning("%s: starting the training over", error)
                return training(resume=False)

    def _record(self, result, curve: LossCurve, window: list[float], seconds: float) -> dict:
        bundle_config = json.loads((result.bundle / "config.json").read_text())
        selection = self.selection
        return {
            "history": result.state.history,
            "steps": result.state.step,
            "best_epoch": result.state.best_epoch,
            "best_dev_score": result.state.best_score,
            # (the dev suite's STS 2017 track: the evaluation marks it dev, as STS-B's dev split)
            "dev_sts": DEV_FILES["sts17_en_en"] if selection == DEV_SUITE_SELECTION else selection,
            "model_selection": selection,
            "dim": bundle_config["dim"],
            "vocab_size": bundle_config["vocab_size"],
            "settings": self.settings,
            "seconds": round(seconds, 3),
            "training_window": window,
            # mean loss per window of steps (of this run's steps: a resumed run starts later)
            "loss_curve": curve.curve(),
        }


def plan_training(
    context: AssetExecutionContext,
    spec: LanguageSpec,
    config: TrainingConfig,
    storage: StorageResource,
    compute: ComputeResource,
    eval_data: EvaluationDataResource,
    profile: ProfileResource,
    profile_asset: str,
) -> ModelTraining:
    """The training ``spec``'s stage would run now: the profile's settings under the run's
    overrides, the model selection, and the fingerprint that decides whether it reruns."""
    stage = Stage(storage, spec.code, "psp_model")
    spm = stage.upstream("sentencepiece_model")
    data = stage.upstream("training_data")
    train_config: TrainConfig = spec.train_config(
        **profile.settings(profile_asset, config.overrides()),
        device=compute.device,
        num_threads=compute.threads,
    )
    held_back = held_back_pairs(storage, spec.code)  # the dev suite's pairs of its language(s)
    selection, dev_evaluator = _model_selection(context, config, eval_data.path(), held_back)
    # a field added after models were trained is left out at the value that trains as before,
    # so an upgrade retrains nothing
    settings = {
        k: v
        for k, v in train_config.to_dict().items()
        if k not in _NOT_IN_FINGERPRINT and TrainConfig.ADDED_LATER.get(k, object()) != v
    }
    key = fingerprint(
        stage=stage.name,
        code=CODE_VERSION,
        spm=spm.fingerprint,
        data=data.fingerprint,
        settings=settings,
        pretokenizer=spec.pretokenizer,
        dev=selection,
    )
    return ModelTraining(
        context,
        spec,
        stage,
        spm,
        data,
        train_config,
        settings,
        key,
        selection,
        dev_evaluator,
        held_back,
        storage,
        compute,
        eval_data,
    )


def build_model(
    context: AssetExecutionContext,
    spec: LanguageSpec,
    config: TrainingConfig,
    storage: StorageResource,
    compute: ComputeResource,
    eval_data: EvaluationDataResource,
    profile: ProfileResource,
    *,
    profile_asset: str = "psp_model",
) -> MaterializeResult:
    """The training stage of ``spec`` (a language, or the multilingual model with
    ``profile_asset="multi_psp_model"``): a new version trained unless one was trained from
    the same inputs and settings, the promotion gate, then the exports of the promoted model."""
    unknown = sorted(set(config.exports) - set(EXPORT_FORMATS))
    if unknown:
        raise Failure(f"psp_model: exports {unknown} unknown; choose from {list(EXPORT_FORMATS)}")
    job = plan_training(context, spec, config, storage, compute, eval_data, profile, profile_asset)
    registry = model_registry(storage, spec.code)  # (adopts a bundle of an earlier release)

    def run() -> tuple[dict, dict]:
        version = None if config.force else registry.find(job.key)
        if version is not None:
            context.log.info(
                "version %s was trained from these inputs and settings: reusing it", version.id
            )
        else:
            version = registry.add_version(job.key, job.train_version)
        return {"bundle": f"{VERSIONS}/{version.id}/model"}, {
            **version.info["record"],
            "version": version.id,
        }

    manifest = job.stage.run(job.key, run, force=config.force)
    if not manifest.reused:
        # the card with the data funnel and the run (the evaluation adds its tables)
        refresh_model_card(manifest, card_facts(job.stage, spec.code, manifest.record))
    version = (
        registry.version(manifest.record["version"])
        if "version" in manifest.record
        else registry.promoted()  # a manifest of an earlier release: its adopted bundle
    )
    decision, line = run_gate(
        registry, version, eval_data.path(), spec.promotion, held_back=job.held_back
    )
    if decision is not None and not decision.promote:
        context.log.warning(line)
    else:
        context.log.info(line)
    removed = registry.prune(spec.promotion.keep_versions)
    if removed:
        context.log.info(
            "removed versions beyond the newest %d: %s", spec.promotion.keep_versions, removed
        )
    promoted = promoted_model(storage, spec.code)
    exports = write_exports(promoted, config.exports)
    metadata = common_metadata(manifest, "bundle")
    metadata.update(gate_metadata(decision, version, registry))
    for format, directory in exports.items():
        metadata[f"export_{format}"] = MetadataValue.path(str(directory))
    metadata.update(training_metadata(manifest.record))
    promoted_check = AssetCheckResult(
        check_name=PROMOTED_CHECK,
        passed=promoted.fingerprint == version.id,
        severity=AssetCheckSeverity.WARN,
        description=line,
        metadata={"version": version.id, "promoted_version": promoted.fingerprint},
    )
    return MaterializeResult(
        metadata=metadata,
        data_version=DataVersion(manifest.fingerprint),
        check_results=[
            *check_bundle(manifest.output("bundle"), job.spm.output("model")),
            promoted_check,
        ],
    )


def training_metadata(record: dict) -> dict[str, MetadataValue]:
    """What the UI shows of a training: sizes, steps, the loss and dev-score pictures, the
    epochs table, the last epoch's loss and speed, the settings and when it ran."""
    history = record["history"]
    metadata = {
        "dim": MetadataValue.int(record["dim"]),
        "vocab_size": MetadataValue.int(record["vocab_size"]),
        "steps": MetadataValue.int(record["steps"]),
        **loss_pictures(record),
        "epochs": epochs_table(history),
        "last_epoch_mean_loss": MetadataValue.float(
            round(float(history[-1]["loss"] or 0.0), 4) if history else 0.0
        ),
        "pairs_per_second": MetadataValue.float(
            round(float(history[-1]["pairs_per_second"] or 0.0), 1) if history else 0.0
        ),
        "seconds": MetadataValue.float(round(float(record["seconds"]), 1)),
        "settings": settings_table(record["settings"]),
    }
    window = record.get("training_window")
    if window:
        metadata["training_started"] = MetadataValue.timestamp(float(window[0]))
        metadata["training_ended"] = MetadataValue.timestamp(float(window[1]))
    if record.get("best_dev_score") is not None:
        metadata["best_dev_score"] = MetadataValue.float(round(float(record["best_dev_score"]), 2))
        # counted from 1, as the epochs table and chart count them
        metadata["best_epoch"] = MetadataValue.int(int(record["best_epoch"]) + 1)
    return metadata
