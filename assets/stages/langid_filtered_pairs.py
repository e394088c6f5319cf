"""langid_filtered_pairs: drop pairs with a side in the wrong language (fastText lid.176)."""

from dataclasses import asdict

from dagster import MetadataValue

from assets.framework.metadata import report_metadata, settings_table
from assets.framework.records import LanguageIdRecord, read_record
from assets.framework.stage import Manifest
from assets.framework.stage_asset import Check, CheckSpec, Plan, Report, StageRun, stage_asset
from assets.settings.config import LanguageIdConfig
from ops.language_id.langid import LanguageRule, filter_language

CODE_VERSION = "2"  # 2: Arabic marks stripped, kana-less "ja" read as "zh"
CHECK = "langid_pass_rate_in_range"


def plan(run: StageRun) -> Plan:
    """The registry's rule for the language's kind, or the run config's ``threshold`` rule."""
    upstream = run.inputs.raw_pairs
    langid = run.resource("langid")
    if run.config.threshold is not None:
        rule = LanguageRule("threshold", threshold=run.config.threshold)
    else:
        rule = run.spec.filters.langid_rule(run.spec.kind)

    def compute() -> tuple[dict, dict]:
        report = filter_language(
            upstream.output("pairs"),
            run.stage.path("pairs.parquet"),
            identifier=langid.identifier(),
            rule=rule,
            workers=run.resource("compute").worker_count(),
        )
        return {"pairs": "pairs.parquet"}, report.as_dict() | {"rule": asdict(rule)}

    key = {"upstream": upstream.fingerprint, "rule": asdict(rule), "model": langid.model_name()}
    return Plan(key, compute, shows={"rule": rule})


def report(run: StageRun, plan: Plan, manifest: Manifest) -> Report:
    """The funnel, the pass rate and the rule; the check that the rate is in the registry's
    range."""
    record = read_record(manifest, LanguageIdRecord)
    rule: LanguageRule = plan.shows["rule"]
    rate = record.pass_rate
    low, high = run.spec.filters.langid_pass_rate_min, run.spec.filters.langid_pass_rate_max
    metadata = report_metadata(manifest, record, "pairs")
    # (a percent, as the funnel and the check's line show it)
    metadata["pass_rate_percent"] = MetadataValue.float(round(100 * rate, 2))
    metadata["rule"] = MetadataValue.text(rule.describe())
    metadata["rule_settings"] = settings_table(asdict(rule))
    check = Check(
        CHECK,
        passed=record.n_out > 0 and low <= rate <= high,
        metadata={
            "pass_rate_percent": round(100 * rate, 2),
            "min_percent": round(100 * low, 2),
            "max_percent": round(100 * high, 2),
            "pairs_out": record.n_out,
        },
        description=(
            f"{rate:.1%} of pairs passed language ID; outside [{low:.0%}, {high:.0%}] "
            "the source is probably mislabelled or the wrong language code is configured"
        ),
    )
    return Report(metadata, [check])


langid_filtered_pairs = stage_asset(
    name="langid_filtered_pairs",
    description="""Drop pairs with a side in another language than the pair's, by the language's rule.

    The rule is the registry's (`bitext_langid_rule` and `paraphrase_langid_rule` in its
    filters tables: by default `other_language` for bitext, `top_label` for ParaNMT); a run
    config `threshold` selects the `threshold` rule with that minimum probability instead.
    """,
    code_version=CODE_VERSION,
    config=LanguageIdConfig,
    inputs=("raw_pairs",),
    kinds={"parquet"},
    resources=("langid", "compute"),
    checks=[
        CheckSpec(
            CHECK,
            "Language ID kept between 20% and 100% of the pairs. Blocking: a lower rate means "
            "the corpus is not the language the registry says (swapped sides, a wrong code), "
            "which training would silently learn from.",
        )
    ],
    plan=plan,
    report=report,
)
