"""langid_filtered_pairs: keep pairs whose both sides fastText lid.176 identifies correctly."""

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

from assets.config import LanguageIdConfig
from assets.metadata import report_metadata
from assets.stage import Stage, fingerprint
from ops.langid import filter_language
from pipelines.languages import load_registry
from pipelines.partitions import language_partitions
from pipelines.resources import ComputeResource, LanguageIdResource, StorageResource

CODE_VERSION = "1"
CHECK = "langid_pass_rate_in_range"


@asset(
    partitions_def=language_partitions,
    group_name="filtering",
    code_version=CODE_VERSION,
    deps=["raw_pairs"],
    kinds={"parquet"},
    check_specs=[AssetCheckSpec(CHECK, asset="langid_filtered_pairs", blocking=True)],
)
def langid_filtered_pairs(
    context: AssetExecutionContext,
    config: LanguageIdConfig,
    storage: StorageResource,
    langid: LanguageIdResource,
    compute: ComputeResource,
) -> MaterializeResult:
    """Drop pairs whose English side is not English or whose other side is not the language."""
    spec = load_registry()[context.partition_key]
    stage = Stage(storage, spec.code, "langid_filtered_pairs")
    upstream = stage.upstream("raw_pairs")
    threshold = config.threshold if config.threshold is not None else spec.filters.langid_threshold
    key = fingerprint(
        stage=stage.name,
        code=CODE_VERSION,
        upstream=upstream.fingerprint,
        threshold=threshold,
        model=langid.model_name(),
    )

    def run() -> tuple[dict, dict]:
        report = filter_language(
            upstream.output("pairs"),
            stage.path("pairs.parquet"),
            identifier=langid.identifier(),
            threshold=threshold,
            workers=compute.worker_count(),
        )
        return {"pairs": "pairs.parquet"}, report.as_dict() | {"threshold": threshold}

    manifest = stage.run(key, run, force=config.force)
    record = manifest.record
    rate = record["n_out"] / record["n_in"] if record["n_in"] else 0.0
    low, high = spec.filters.langid_pass_rate_min, spec.filters.langid_pass_rate_max
    metadata = report_metadata(manifest, record, "pairs")
    metadata["pass_rate"] = MetadataValue.float(round(rate, 4))
    metadata["threshold"] = MetadataValue.float(threshold)
    return MaterializeResult(
        metadata=metadata,
        data_version=DataVersion(manifest.fingerprint),
        check_results=[
            AssetCheckResult(
                check_name=CHECK,
                passed=record["n_out"] > 0 and low <= rate <= high,
                severity=AssetCheckSeverity.ERROR,
                metadata={"pass_rate": rate, "min": low, "max": high, "pairs_out": record["n_out"]},
                description=(
                    f"{rate:.1%} of pairs passed language ID; outside [{low:.0%}, {high:.0%}] "
                    "the source is probably mislabelled or the wrong language code is configured"
                ),
            )
        ],
    )
