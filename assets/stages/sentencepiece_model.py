"""sentencepiece_model: the shared sentencepiece vocabulary, trained on both sides of the
deduplicated (lowercased; for zh, segmented) pairs from a bounded uniform sample; for an
incremental retrain (:mod:`assets.stages.retrain_plan`), the parent version's vocabulary, copied."""

import time

from dagster import MetadataValue

from assets.framework.metadata import common_metadata
from assets.framework.records import SentencepieceRecord, read_record
from assets.framework.stage import Manifest
from assets.framework.stage_asset import Plan, Report, StageRun, stage_asset
from assets.lifecycle.model_versions import model_registry
from assets.settings.config import SentencepieceConfig
from assets.stages.retrain_plan import copy_parent_vocabulary, current_plan, starting_version
from ops.training_data.sentencepiece_model import train_sentencepiece_from_pairs
from psp_core.tokenization.tokenizer import Tokenizer

CODE_VERSION = "1"
SEED = 1


def plan(run: StageRun, *, profile_asset: str = "sentencepiece_model") -> Plan:
    """The vocabulary's settings: the spec's, then the profile's ``profile_asset`` entry, then
    the run config's, each over the one before (the multilingual model's vocabulary takes
    ``profile_asset="multi_sentencepiece_model"``)."""
    upstream = run.inputs.deduplicated_pairs
    settings = run.spec.sentencepiece.plan_settings()
    explicit = {
        "vocab_size": run.config.vocab_size,
        "input_sentence_size": run.config.input_sentence_size,
    }
    settings.update(run.resource("profile").settings(profile_asset, explicit))
    start = starting_version(current_plan(run), run.spec.code)
    if start is not None:  # (the parent's, or the multilingual model's)
        return _parent_vocabulary(run, *start, settings)

    def compute() -> tuple[dict, dict]:
        started = time.perf_counter()
        path = train_sentencepiece_from_pairs(
            upstream.output("pairs"),
            run.stage.path("sentencepiece.model"),
            seed=SEED,
            num_threads=run.resource("compute").threads or 2,
            **settings,
        )
        return {"model": path.name}, _record(path, settings, started)

    return Plan({"upstream": upstream.fingerprint, "settings": settings}, compute)


def _record(path, settings: dict, started: float, **extra) -> dict:
    """The stage's record of the sentencepiece model at ``path``: the settings it was asked
    for, the vocabulary it has, its hash, the stage's time (and ``extra`` keys)."""
    tokenizer = Tokenizer.from_file(path)
    return SentencepieceRecord(
        settings=settings,
        vocab_size=tokenizer.vocab_size,
        sha256=tokenizer.sha256,
        seconds=round(time.perf_counter() - started, 3),
        extra=extra,
    ).as_dict()


def _parent_vocabulary(run: StageRun, code: str, parent: str, settings: dict) -> Plan:
    """The plan of a retrain that continues a version (``code``'s: the language's own, or the
    multilingual model's): that version's sentencepiece model, as it is (the training file is
    encoded with it, the model continues its embedding rows)."""
    registry = model_registry(run.storage, code)

    def compute() -> tuple[dict, dict]:
        started = time.perf_counter()
        path = run.stage.path("sentencepiece.model")
        copy_parent_vocabulary(registry, parent, path)
        return {"model": path.name}, _record(path, settings, started, copied_from=parent)

    return Plan({"copied_from": parent}, compute)


def report(run: StageRun, plan: Plan, manifest: Manifest) -> Report:
    """The vocabulary's size (and the size asked for), its hash and the training's time."""
    record = read_record(manifest, SentencepieceRecord)
    metadata = common_metadata(manifest, "model")
    metadata.update(
        {
            "vocab_size": MetadataValue.int(record.vocab_size),
            "requested_vocab_size": MetadataValue.int(record.requested_vocab_size),
            "sha256": MetadataValue.text(record.sha256),
            "seconds": MetadataValue.float(round(record.seconds, 1)),
        }
    )
    return Report(metadata)


sentencepiece_model = stage_asset(
    name="sentencepiece_model",
    description="Train the unigram sentencepiece model (paper: vocab 50,000, coverage 0.995, "
    "10M sample).",
    code_version=CODE_VERSION,
    config=SentencepieceConfig,
    inputs=("deduplicated_pairs", "retrain_plan"),
    kinds={"sentencepiece"},
    resources=("compute", "profile"),
    # ops' log lines (the sample size, a vocabulary raised to fit the script) in the run's log
    loggers=("ops",),
    plan=plan,
    report=report,
)
