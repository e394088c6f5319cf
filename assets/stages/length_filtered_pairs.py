"""length_filtered_pairs: the paper's length filter (bitext), and for ParaNMT also its
paraphrase-score and trigram-overlap filters."""

from dataclasses import asdict

from assets.framework.metadata import report_metadata, settings_table
from assets.framework.records import PairCounts, read_record
from assets.framework.stage import Manifest
from assets.framework.stage_asset import Check, CheckSpec, Plan, Report, StageRun, stage_asset
from assets.settings.config import StageConfig
from ops.cleaning.filters import filter_pairs

CODE_VERSION = "1"
CHECK = "length_filtered_pairs_not_empty"


def plan(run: StageRun) -> Plan:
    """The registry's thresholds for the language's kind."""
    upstream = run.inputs.langid_filtered_pairs
    kind, thresholds = run.spec.kind, run.spec.filters.filter_config()

    def compute() -> tuple[dict, dict]:
        output = run.stage.path("pairs.parquet")
        report = filter_pairs(upstream.output("pairs"), output, kind=kind, config=thresholds)
        return {"pairs": "pairs.parquet"}, report.as_dict()

    key = {"upstream": upstream.fingerprint, "kind": kind, "thresholds": asdict(thresholds)}
    return Plan(key, compute, shows={"thresholds": asdict(thresholds)})


def report(run: StageRun, plan: Plan, manifest: Manifest) -> Report:
    """The funnel and the thresholds; the check that some pairs passed."""
    record = read_record(manifest, PairCounts)
    metadata = report_metadata(manifest, record, "pairs")
    metadata["thresholds"] = settings_table(plan.shows["thresholds"])
    return Report(metadata, [Check(CHECK, record.n_out > 0, {"pairs_out": record.n_out})])


length_filtered_pairs = stage_asset(
    name="length_filtered_pairs",
    description="Apply the length (and, for paraphrases, score and trigram-overlap) filters.",
    code_version=CODE_VERSION,
    config=StageConfig,
    inputs=("langid_filtered_pairs",),
    kinds={"parquet"},
    checks=[
        CheckSpec(
            CHECK,
            "At least one pair passed the length (and for ParaNMT score and trigram) filters. "
            "Blocking: nothing left to train on.",
        )
    ],
    plan=plan,
    report=report,
)
