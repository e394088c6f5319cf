"""deduplicated_pairs: lowercased, exact-pair deduplicated (first copy kept), and for languages
with a pre-tokenizer (zh) segmented with jieba: the text the vocabulary and model see."""

from dagster import (
    AssetCheckResult,
    AssetCheckSeverity,
    AssetCheckSpec,
    AssetExecutionContext,
    DataVersion,
    MaterializeResult,
    MetadataValue,
    asset,
)

from assets.config import StageConfig
from assets.metadata import pipeline_funnel_markdown, report_metadata
from assets.stage import Stage, fingerprint
from ops.dedup import deduplicate
from ops.segmentation import segment_pairs
from pipelines.languages import load_registry
from pipelines.partitions import language_partitions
from pipelines.resources import ComputeResource, StorageResource

CODE_VERSION = "1"
CHECK = "deduplicated_pairs_not_empty"
FUNNEL_STAGES = ("raw_pairs", "langid_filtered_pairs", "length_filtered_pairs")


@asset(
    partitions_def=language_partitions,
    group_name="filtering",
    code_version=CODE_VERSION,
    deps=["length_filtered_pairs"],
    kinds={"parquet"},
    check_specs=[AssetCheckSpec(CHECK, asset="deduplicated_pairs", blocking=True)],
)
def deduplicated_pairs(
    context: AssetExecutionContext,
    config: StageConfig,
    storage: StorageResource,
    compute: ComputeResource,
) -> MaterializeResult:
    """Lowercase and drop repeated pairs; segment Chinese with jieba."""
    spec = load_registry()[context.partition_key]
    stage = Stage(storage, spec.code, "deduplicated_pairs")
    upstream = stage.upstream("length_filtered_pairs")
    key = fingerprint(
        stage=stage.name,
        code=CODE_VERSION,
        upstream=upstream.fingerprint,
        pretokenizer=spec.pretokenizer,
    )

    def run() -> tuple[dict, dict]:
        final = stage.path("pairs.parquet")
        if spec.pretokenizer == "none":
            return {"pairs": final.name}, deduplicate(upstream.output("pairs"), final).as_dict()
        unsegmented = stage.path("deduplicated.parquet")
        report = deduplicate(upstream.output("pairs"), unsegmented).as_dict()
        segmented = segment_pairs(
            unsegmented, final, cache_dir=storage.cache_dir(), workers=compute.worker_count()
        ).as_dict()
        unsegmented.unlink()
        report["seconds"] += segmented["seconds"]
        return {"pairs": final.name}, report | {"segmentation": segmented}

    manifest = stage.run(key, run, force=config.force)
    record = manifest.record
    metadata = report_metadata(manifest, record, "pairs")
    funnel = [(name, stage.upstream(name).record) for name in FUNNEL_STAGES]
    funnel.append((stage.name, record))
    metadata["pipeline_funnel"] = MetadataValue.md(pipeline_funnel_markdown(funnel))
    metadata["pretokenizer"] = MetadataValue.text(spec.pretokenizer)
    return MaterializeResult(
        metadata=metadata,
        data_version=DataVersion(manifest.fingerprint),
        check_results=[
            AssetCheckResult(
                check_name=CHECK,
                passed=record["n_out"] > 0,
                severity=AssetCheckSeverity.ERROR,
                metadata={"pairs_out": record["n_out"]},
            )
        ],
    )
