"""model_evaluation: the evaluation suites of the model (psp_core.evaluation: STS 2012-2016,
STS 2017, STS Benchmark, retrieval, speed), as JSON and markdown beside the bundle and as
metadata tables, one per suite.

The STS file training selected the model on (``TrainingConfig.dev_sts``) is marked dev in every
table and left out of the means; a mean over less than the paper's says what it is over."""

import hashlib
import json
from pathlib import Path

from dagster import MetadataValue

import psp_core  # its model (torch) is imported when a step loads one
from assets.framework.catalog import MODEL_GROUP
from assets.framework.metadata import common_metadata
from assets.framework.records import EvaluationRecord, ModelRecord, read_record
from assets.framework.stage import Manifest
from assets.framework.stage_asset import Plan, Report, StageRun, stage_asset
from assets.lifecycle.evaluation_tables import evaluation_tables
from assets.lifecycle.model_cards import card_facts, refresh_model_card
from assets.lifecycle.model_versions import model_registry, promoted_model, test_scores_of
from assets.settings.config import EvaluationConfig, TrainingConfig
from psp_core.evaluation import EvaluationPlan, evaluate_model, plan_for_language
from psp_core.evaluation.registry import suites_with_subsets
from psp_core.evaluation.suites.sts_years import PAPER_STS_MEAN

CODE_VERSION = "4"  # 4: STS-B train is not evaluated (training data, not a result)
#: the paper profile's repeats of the speed measurement (the best is reported)
PAPER_SPEED_REPEATS = 3


def tree_signature(directory: Path) -> str:
    """A hash of every file's relative path, size and modification time under ``directory``."""
    if not directory.is_dir():
        raise FileNotFoundError(
            f"evaluation data directory {directory} does not exist; fetch it with "
            "`psp fetch-eval-data` or point the eval_data resource (PSP_EVAL_DIR) at it"
        )
    listing = [
        (str(path.relative_to(directory)), path.stat().st_size, path.stat().st_mtime_ns)
        for path in sorted(directory.rglob("*"))
        if path.is_file()
    ]
    return hashlib.sha256(json.dumps(listing).encode()).hexdigest()[:16]


def dev_sts_of(model: Manifest) -> str | None:
    """The STS file, relative to the evaluation directory, that ``psp_model`` selected the model
    on; None when it kept no best epoch (no dev file configured or found: no model selection).

    A ``psp_model`` record names whether it selected on a dev file (``best_dev_score``) but not
    which one unless it records ``dev_sts``; without that, the file is ``TrainingConfig``'s
    default (STS 2017 en-en, as in the paper), the only one a run without a ``dev_sts``
    override uses.
    """
    record = read_record(model, ModelRecord)
    if record.best_dev_score is None:
        return None
    return record.dev_sts or TrainingConfig.model_fields["dev_sts"].default


def language_plan(run: StageRun) -> Plan:
    """The paper's suites for the language (`psp_core.evaluation.plan_for_language`)."""
    return plan(run, plan_for_language(run.spec.code))


def plan(run: StageRun, suites_for: EvaluationPlan) -> Plan:
    """The evaluation of the promoted model of the run's language (or ``multi``) on
    ``suites_for``, unless the config names suites or a suite's subsets (its
    ``subset_option``: STS 2017 tracks, retrieval languages); the key names the model's version
    and the evaluation data's files."""
    config, code, stage = run.config, run.spec.code, run.stage
    model = promoted_model(run.storage, code)  # the language's model: its promoted version
    dev_sts = dev_sts_of(model)
    eval_dir = run.resource("eval_data").path()
    suites = sorted(config.suites if config.suites is not None else suites_for.suites)
    subsets = {}
    for each in suites_with_subsets():
        chosen = getattr(config, each.subset_option, None)
        subsets[each] = (
            list(chosen) if chosen is not None else list(suites_for.subsets_of(each.name))
        )
    profile = run.resource("profile")
    speed_repeats = profile.settings("model_evaluation", {"speed_repeats": config.speed_repeats})
    speed_repeats = speed_repeats.get("speed_repeats", PAPER_SPEED_REPEATS)

    def compute() -> tuple[dict, dict]:
        results = evaluate_model(
            psp_core.load_model(model.output("bundle")),
            eval_dir,
            suites,
            speed_repeats=speed_repeats,
            model_name=f"psp-{code}",
            dev_sts=dev_sts,
            **{each.subset_option: chosen for each, chosen in subsets.items()},
        )
        summary = results.to_dict()
        stage.path("results.json").write_text(json.dumps(summary, indent=2) + "\n")
        stage.path("results.md").write_text(results.to_markdown() + "\n")
        record = EvaluationRecord(
            sts_mean=summary["sts"]["mean"],
            sts_mean_note=summary["sts"]["mean_note"],
            dev_sts=summary["dev_sts"],
            sts17=summary["sts17"],
            speed=summary["speed"],
            missing=summary["missing"],
        )
        return {"json": "results.json", "markdown": "results.md"}, record.as_dict()

    key = {
        # this stage's code version also for the multilingual model's evaluation (whose
        # asset has its own)
        "code": CODE_VERSION,
        "model": model.fingerprint,
        "eval_data": tree_signature(eval_dir),
        "suites": suites,
        **{each.subset_key or each.subset_option: chosen for each, chosen in subsets.items()},
        "dev_sts": dev_sts,
        "speed_repeats": speed_repeats,
    }
    return Plan(key, compute, shows={"model": model})


#: how to read the figures below, which the UI shows bare
SCALES = (
    "STS figures (the *_pearson entries, the STS tables): Pearson r x 100, higher is better; "
    "Tatoeba: error %, lower is better; speed: sentences/s on this machine"
)


def report(run: StageRun, plan: Plan, manifest: Manifest) -> Report:
    """The results, one table per suite and the markdown report; records the version's test
    scores in the model registry and puts the tables in the model card."""
    model: Manifest = plan.shows["model"]
    code = run.spec.code
    # the version's test scores beside it, for psp models list (the gate never reads them)
    summary = json.loads(manifest.output("json").read_text())
    model_registry(run.storage, code).record_evaluation(model.fingerprint, test_scores_of(summary))
    # the model card (bundle and exports) gets the evaluation's tables
    markdown = manifest.output("markdown").read_text()
    refresh_model_card(
        model, card_facts(run.stage, code, read_record(model, ModelRecord), markdown)
    )
    record = read_record(manifest, EvaluationRecord)
    metadata = common_metadata(manifest, "json")
    # one table per suite, inline; the whole markdown report (with notes) one click away
    metadata.update(evaluation_tables(json.loads(manifest.output("json").read_text())))
    metadata["results"] = MetadataValue.md(markdown)
    metadata["missing"] = MetadataValue.text(", ".join(record.missing) or "nothing")
    metadata["dev_sts"] = MetadataValue.text(record.dev_sts or "none (no model selection)")
    metadata["scales"] = MetadataValue.text(SCALES)
    if record.sts_mean:
        metadata["sts_mean_pearson"] = MetadataValue.float(round(record.sts_mean["pearson"], 2))
        metadata["sts_mean_over"] = MetadataValue.text(
            record.sts_mean_note or f"2012-2016, as the paper's {PAPER_STS_MEAN}"
        )
    for track, values in record.sts17.items():
        dev = "_dev" if values["dev"] else ""  # the model-selection track: in no mean
        metadata[f"sts17_{track}{dev}_pearson"] = MetadataValue.float(round(values["pearson"], 2))
    return Report(metadata)


model_evaluation = stage_asset(
    name="model_evaluation",
    description="""Evaluate the language's model on the evaluation data directory: by default the paper's
    suites for the language (STS, cross-lingual STS and Tatoeba, as far as the language has them).""",
    code_version=CODE_VERSION,
    config=EvaluationConfig,
    inputs=("psp_model",),
    kinds={"json"},
    resources=("eval_data", "profile"),
    group=MODEL_GROUP,
    loggers=(),
    plan=language_plan,
    report=report,
)
