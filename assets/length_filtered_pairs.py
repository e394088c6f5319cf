"""length_filtered_pairs: the paper's length filter (bitext), and for ParaNMT also its
paraphrase-score and trigram-overlap filters."""

from dataclasses import asdict

from dagster import (
    AssetCheckResult,
    AssetCheckSeverity,
    AssetCheckSpec,
    AssetExecutionContext,
    DataVersion,
    MaterializeResult,
    asset,
)

from assets.catalog import DATA_GROUP, OWNERS
from assets.config import StageConfig, op_config, plain_schema
from assets.languages import load_registry
from assets.log_bridge import logs_to_dagster
from assets.metadata import report_metadata, settings_table
from assets.partitions import language_partitions
from assets.resources import StorageResource
from assets.stage import Stage, fingerprint
from ops.filters import filter_pairs

CODE_VERSION = "1"
CHECK = "length_filtered_pairs_not_empty"


@asset(
    config_schema=plain_schema(StageConfig),
    partitions_def=language_partitions,
    group_name=DATA_GROUP,
    owners=OWNERS,
    code_version=CODE_VERSION,
    deps=["langid_filtered_pairs"],
    kinds={"parquet"},
    check_specs=[
        AssetCheckSpec(
            CHECK,
            asset="length_filtered_pairs",
            blocking=True,
            description="At least one pair passed the length (and for ParaNMT score and trigram) "
            "filters. Blocking: nothing left to train on.",
        )
    ],
)
def length_filtered_pairs(
    context: AssetExecutionContext, storage: StorageResource
) -> MaterializeResult:
    """Apply the length (and, for paraphrases, score and trigram-overlap) filters."""
    config = op_config(context, StageConfig)
    spec = load_registry()[context.partition_key]
    stage = Stage(storage, spec.code, "length_filtered_pairs")
    upstream = stage.upstream("langid_filtered_pairs")
    thresholds = spec.filters.filter_config()
    key = fingerprint(
        stage=stage.name,
        code=CODE_VERSION,
        upstream=upstream.fingerprint,
        kind=spec.kind,
        thresholds=asdict(thresholds),
    )

    def run() -> tuple[dict, dict]:
        report = filter_pairs(
            upstream.output("pairs"), stage.path("pairs.parquet"), kind=spec.kind, config=thresholds
        )
        return {"pairs": "pairs.parquet"}, report.as_dict()

    with logs_to_dagster(context.log, "ops"):  # the stage's progress lines
        manifest = stage.run(key, run, force=config.force)
    metadata = report_metadata(manifest, manifest.record, "pairs")
    metadata["thresholds"] = settings_table(asdict(thresholds))
    n_out = manifest.record["n_out"]
    return MaterializeResult(
        metadata=metadata,
        data_version=DataVersion(manifest.fingerprint),
        check_results=[
            AssetCheckResult(
                check_name=CHECK,
                passed=n_out > 0,
                severity=AssetCheckSeverity.ERROR,
                metadata={"pairs_out": n_out},
            )
        ],
    )
