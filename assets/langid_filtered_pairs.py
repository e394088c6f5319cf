"""langid_filtered_pairs: drop pairs with a side in the wrong language (fastText lid.176)."""

from dataclasses import asdict

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

from assets.catalog import DATA_GROUP, OWNERS
from assets.config import LanguageIdConfig, op_config, plain_schema
from assets.languages import load_registry
from assets.log_bridge import logs_to_dagster
from assets.metadata import report_metadata, settings_table
from assets.partitions import language_partitions
from assets.resources import ComputeResource, LanguageIdResource, StorageResource
from assets.stage import Stage, fingerprint
from ops.langid import LanguageRule, filter_language

CODE_VERSION = "2"  # 2: Arabic marks stripped, kana-less "ja" read as "zh"
CHECK = "langid_pass_rate_in_range"


@asset(
    config_schema=plain_schema(LanguageIdConfig),
    partitions_def=language_partitions,
    group_name=DATA_GROUP,
    owners=OWNERS,
    code_version=CODE_VERSION,
    deps=["raw_pairs"],
    kinds={"parquet"},
    check_specs=[
        AssetCheckSpec(
            CHECK,
            asset="langid_filtered_pairs",
            blocking=True,
            description="Language ID kept between 20% and 100% of the pairs. Blocking: a lower "
            "rate means the corpus is not the language the registry says (swapped sides, a "
            "wrong code), which training would silently learn from.",
        )
    ],
)
def langid_filtered_pairs(
    context: AssetExecutionContext,
    storage: StorageResource,
    langid: LanguageIdResource,
    compute: ComputeResource,
) -> MaterializeResult:
    """Drop pairs with a side in another language than the pair's, by the language's rule.

    The rule is the registry's (`FilterSettings.langid_rule(kind)`: `other_language` for
    bitext, `top_label` for ParaNMT, by default); a run config `threshold` selects the
    `threshold` rule with that minimum probability instead.
    """
    config = op_config(context, LanguageIdConfig)
    spec = load_registry()[context.partition_key]
    stage = Stage(storage, spec.code, "langid_filtered_pairs")
    upstream = stage.upstream("raw_pairs")
    if config.threshold is not None:
        rule = LanguageRule("threshold", threshold=config.threshold)
    else:
        rule = spec.filters.langid_rule(spec.kind)
    key = fingerprint(
        stage=stage.name,
        code=CODE_VERSION,
        upstream=upstream.fingerprint,
        rule=asdict(rule),
        model=langid.model_name(),
    )

    def run() -> tuple[dict, dict]:
        report = filter_language(
            upstream.output("pairs"),
            stage.path("pairs.parquet"),
            identifier=langid.identifier(),
            rule=rule,
            workers=compute.worker_count(),
        )
        return {"pairs": "pairs.parquet"}, report.as_dict() | {"rule": asdict(rule)}

    with logs_to_dagster(context.log, "ops"):  # the stage's progress lines
        manifest = stage.run(key, run, force=config.force)
    record = manifest.record
    rate = record["n_out"] / record["n_in"] if record["n_in"] else 0.0
    low, high = spec.filters.langid_pass_rate_min, spec.filters.langid_pass_rate_max
    metadata = report_metadata(manifest, record, "pairs")
    metadata["pass_rate"] = MetadataValue.float(round(rate, 4))
    metadata["rule"] = MetadataValue.text(rule.describe())
    metadata["rule_settings"] = settings_table(asdict(rule))
    return MaterializeResult(
        metadata=metadata,
        data_version=DataVersion(manifest.fingerprint),
        check_results=[
            AssetCheckResult(
                check_name=CHECK,
                passed=record["n_out"] > 0 and low <= rate <= high,
                severity=AssetCheckSeverity.ERROR,
                metadata={
                    "pass_rate": round(rate, 4),
                    "min": low,
                    "max": high,
                    "pairs_out": record["n_out"],
                },
                description=(
                    f"{rate:.1%} of pairs passed language ID; outside [{low:.0%}, {high:.0%}] "
                    "the source is probably mislabelled or the wrong language code is configured"
                ),
            )
        ],
    )
