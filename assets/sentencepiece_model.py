"""sentencepiece_model: the shared sentencepiece vocabulary, trained on both sides of the
deduplicated (lowercased; for zh, segmented) pairs from a bounded uniform sample."""

import time
from dataclasses import asdict

from dagster import AssetExecutionContext, DataVersion, MaterializeResult, MetadataValue, asset

from assets.catalog import DATA_GROUP, OWNERS
from assets.config import SentencepieceConfig, op_config, plain_schema
from assets.languages import LanguageSpec, load_registry
from assets.log_bridge import logs_to_dagster
from assets.metadata import common_metadata
from assets.partitions import language_partitions
from assets.profiles import ProfileResource
from assets.resources import ComputeResource, StorageResource
from assets.stage import Stage, fingerprint
from ops.sentencepiece_model import train_sentencepiece_from_pairs
from psp_core.tokenization.tokenizer import Tokenizer

CODE_VERSION = "1"
SEED = 1


@asset(
    config_schema=plain_schema(SentencepieceConfig),
    partitions_def=language_partitions,
    group_name=DATA_GROUP,
    owners=OWNERS,
    code_version=CODE_VERSION,
    deps=["deduplicated_pairs"],
    kinds={"sentencepiece"},
)
def sentencepiece_model(
    context: AssetExecutionContext,
    storage: StorageResource,
    compute: ComputeResource,
    profile: ProfileResource,
) -> MaterializeResult:
    """Train the unigram sentencepiece model (paper: vocab 50,000, coverage 0.995, 10M sample)."""
    config = op_config(context, SentencepieceConfig)
    spec = load_registry()[context.partition_key]
    return build_sentencepiece(context, spec, config, storage, compute, profile)


def build_sentencepiece(
    context: AssetExecutionContext,
    spec: LanguageSpec,
    config: SentencepieceConfig,
    storage: StorageResource,
    compute: ComputeResource,
    profile: ProfileResource,
    *,
    profile_asset: str = "sentencepiece_model",
) -> MaterializeResult:
    """The vocabulary stage of ``spec`` (a language, or the multilingual model with
    ``profile_asset="multi_sentencepiece_model"``): settings from the spec, the profile's
    ``profile_asset`` entry and the run config, in that order of precedence reversed."""
    stage = Stage(storage, spec.code, "sentencepiece_model")
    upstream = stage.upstream("deduplicated_pairs")
    settings = asdict(spec.sentencepiece)
    explicit = {"vocab_size": config.vocab_size, "input_sentence_size": config.input_sentence_size}
    settings.update(profile.settings(profile_asset, explicit))
    key = fingerprint(
        stage=stage.name, code=CODE_VERSION, upstream=upstream.fingerprint, settings=settings
    )

    def run() -> tuple[dict, dict]:
        started = time.perf_counter()
        path = train_sentencepiece_from_pairs(
            upstream.output("pairs"),
            stage.path("sentencepiece.model"),
            seed=SEED,
            num_threads=compute.threads or 2,
            **settings,
        )
        tokenizer = Tokenizer.from_file(path)
        record = {
            "settings": settings,
            "vocab_size": tokenizer.vocab_size,
            "sha256": tokenizer.sha256,
            "seconds": round(time.perf_counter() - started, 3),
        }
        return {"model": path.name}, record

    # ops' log lines (the sample size, a vocabulary raised to fit the script) in the run's log
    with logs_to_dagster(context.log, "ops"):
        manifest = stage.run(key, run, force=config.force)
    record = manifest.record
    metadata = common_metadata(manifest, "model")
    metadata.update(
        {
            "vocab_size": MetadataValue.int(record["vocab_size"]),
            "requested_vocab_size": MetadataValue.int(record["settings"]["vocab_size"]),
            "sha256": MetadataValue.text(record["sha256"]),
            "seconds": MetadataValue.float(round(record["seconds"], 1)),
        }
    )
    return MaterializeResult(metadata=metadata, data_version=DataVersion(manifest.fingerprint))
