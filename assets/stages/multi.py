"""The multilingual model (group ``multi``): one vocabulary and one model for every language of
the registry's ``[multi]`` table, trained on the union of the languages' deduplicated pairs
(the per-language chain's own outputs, never a second download), each language drawn by
temperature sampling (:mod:`ops.pairs.multi_pairs`).

The assets are unpartitioned and stored under the code ``multi``; past the pairs they run the
per-language stages' own code (vocabulary, packing, training, evaluation) with the ``[multi]``
settings, so the multilingual model is trained and evaluated exactly as a language's model is,
and retrained incrementally as one is (``multi_retrain_plan``, :mod:`assets.stages.retrain_plan`).
``make run PARTITION=multi`` prepares the languages' pairs first (``scripts/run_multi.py``).
"""

from functools import partial

from dagster import (
    AllPartitionMapping,
    AssetDep,
    AssetExecutionContext,
    Failure,
    MetadataValue,
)

from assets.framework.catalog import MULTI_GROUP
from assets.framework.metadata import common_metadata
from assets.framework.records import MultiPairsRecord, read_record
from assets.framework.stage import Manifest, read_manifest
from assets.framework.stage_asset import Check, CheckSpec, Plan, Report, StageRun, stage_asset
from assets.settings.config import (
    EvaluationConfig,
    MultiPairsConfig,
    MultiTrainingConfig,
    RetrainConfig,
    SentencepieceConfig,
    TrainingDataConfig,
)
from assets.settings.languages import LanguageSpec, load_registry
from assets.settings.resources import StorageResource
from assets.stages import (
    deduplicated_pairs,
    model_evaluation,
    psp_model,
    retrain_plan,
    sentencepiece_model,
    training_data,
)
from ops.pairs.multi_pairs import LanguagePairs, sample_languages
from psp_core.evaluation import plan_for_languages
from psp_core.tokenization.tokenizer import make_pretokenizer

CODE_VERSION = "1"
#: seeds the temperature sample
SAMPLING_SEED = 1234
PAIRS_CHECK = deduplicated_pairs.CHECK


def language_inputs(storage: StorageResource) -> tuple[list[LanguagePairs], dict[str, str]]:
    """Each ``[multi]`` language's deduplicated pairs (the unsegmented ones of a segmented
    language: the multilingual pre-tokenizer applies to raw text) and their fingerprints.

    Raises:
        Failure: some languages have no deduplicated pairs yet; the message names them and
            how to build them.
    """
    registry = load_registry()
    inputs, fingerprints, missing = [], {}, []
    for code in registry.multi_languages():
        manifest = read_manifest(storage.stage_dir(code, "deduplicated_pairs"))
        if manifest is None or not manifest.complete():
            missing.append(code)
            continue
        segmented = registry[code].pretokenizer != "none"
        if segmented and "unsegmented" not in manifest.outputs:
            missing.append(code)  # written before the unsegmented pairs were kept
            continue
        path = manifest.output("unsegmented" if segmented else "pairs")
        inputs.append(LanguagePairs(code, registry[code].kind, path))
        fingerprints[code] = manifest.fingerprint
    if missing:
        raise Failure(
            f"the multilingual model needs the deduplicated pairs of {', '.join(missing)}, "
            f"which are not there (or predate the multilingual model) under {storage.root}. "
            "Build them first: `make run PARTITION=multi` does, or materialize "
            "deduplicated_pairs (with its upstream) for those partitions in the UI, or "
            "`dagster job execute -j prepare_pairs_job --tags "
            f'\'{{"dagster/partition": "{missing[0]}"}}\'` for each.'
        )
    return inputs, fingerprints


def languages_table(record: MultiPairsRecord) -> MetadataValue:
    registry = load_registry()
    lines = [
        "| language | source | kind | pairs in | pairs out | share | whole copies | sampled |",
        "|---|---|---|---:|---:|---:|---:|---:|",
    ]
    for code, row in record.languages.items():
        source = registry[code].source
        lines.append(
            f"| {code} | {source} | {row['kind']} | {row['pairs_in']:,} | {row['pairs_out']:,} "
            f"| {row['share']:.1%} | {row['copies']} | {row['sampled']:,} |"
        )
    return MetadataValue.md("\n".join(lines))


def multi_language(context: AssetExecutionContext) -> LanguageSpec:
    """The multilingual model as a language: the code ``multi`` and the ``[multi]`` settings."""
    return load_registry().multi.as_language()


def pairs_plan(run: StageRun) -> Plan:
    """The languages' pairs (their fingerprints and kinds), the sampling exponent and seed, and
    the multilingual pre-tokenizer.

    Raises:
        Failure: a language's pairs are missing, or ``sampling_alpha`` is outside [0, 1].
    """
    multi = load_registry().multi
    inputs, upstream = language_inputs(run.storage)
    alpha = multi.sampling_alpha if run.config.sampling_alpha is None else run.config.sampling_alpha
    if not 0.0 <= alpha <= 1.0:
        raise Failure(f"sampling_alpha must be in [0, 1], got {alpha}")

    def compute() -> tuple[dict, dict]:
        record = sample_languages(
            inputs,
            run.stage.path("pairs.parquet"),
            alpha=alpha,
            seed=SAMPLING_SEED,
            pretokenize=make_pretokenizer(multi.pretokenizer),
        )
        return {"pairs": "pairs.parquet"}, record

    key = {
        "stage": "multi_pairs",  # the asset's name (its directory is deduplicated_pairs)
        "upstream": upstream,
        "kinds": {lang.code: lang.kind for lang in inputs},
        "alpha": alpha,
        "seed": SAMPLING_SEED,
        "pretokenizer": multi.pretokenizer,
    }
    return Plan(key, compute)


def pairs_report(run: StageRun, plan: Plan, manifest: Manifest) -> Report:
    """Per language its pairs and share of the sample; the check that the union has pairs."""
    record = read_record(manifest, MultiPairsRecord)
    metadata = common_metadata(manifest, "pairs")
    metadata.update(
        {
            "languages": languages_table(record),
            "pairs_in": MetadataValue.int(record.n_in),
            "pairs_out": MetadataValue.int(record.n_out),
            "sampling_alpha": MetadataValue.float(record.alpha),
            "pretokenizer": MetadataValue.text(plan.key["pretokenizer"]),
        }
    )
    check = Check(PAIRS_CHECK, record.n_out > 0, {"pairs_out": record.n_out})
    return Report(metadata, [check])


#: the multilingual chain's assets by the stage each writes (its directory under multi/): the
#: shared stages' plans read their inputs by those names
MULTI_ASSETS = {
    "deduplicated_pairs": "multi_pairs",
    "retrain_plan": "multi_retrain_plan",
    "sentencepiece_model": "multi_sentencepiece_model",
    "training_data": "multi_training_data",
    "psp_model": "multi_psp_model",
}


multi_pairs = stage_asset(
    name="multi_pairs",
    description="""Every `[multi]` language's deduplicated pairs, temperature-sampled into one file with
    each pair's language, pre-tokenized with the multilingual pre-tokenizer.""",
    code_version=CODE_VERSION,
    config=MultiPairsConfig,
    reads_across_partitions=[
        AssetDep("deduplicated_pairs", partition_mapping=AllPartitionMapping())
    ],
    kinds={"parquet"},
    checks=[
        CheckSpec(
            PAIRS_CHECK,
            "At least one pair in the union. Blocking: the vocabulary and the training need data.",
        )
    ],
    stage="deduplicated_pairs",
    spec=multi_language,
    partitions_def=None,
    group=MULTI_GROUP,
    plan=pairs_plan,
    report=pairs_report,
)

multi_retrain_plan = stage_asset(
    name="multi_retrain_plan",
    description="Decide how the next multilingual version is trained (incremental from the "
    "promoted version, or full) and why; select an incremental retrain's new and replayed pairs.",
    code_version=retrain_plan.CODE_VERSION,
    config=RetrainConfig,
    inputs=("deduplicated_pairs",),
    input_assets=MULTI_ASSETS,
    kinds={"parquet"},
    stage="retrain_plan",
    spec=multi_language,
    partitions_def=None,
    group=MULTI_GROUP,
    plan=retrain_plan.plan,
    report=retrain_plan.report,
)

multi_sentencepiece_model = stage_asset(
    name="multi_sentencepiece_model",
    description="""One vocabulary for every script (default 50,000, the paper's), trained on a sample of
    the temperature-sampled pairs.""",
    code_version=sentencepiece_model.CODE_VERSION,
    config=SentencepieceConfig,
    inputs=("deduplicated_pairs", "retrain_plan"),
    input_assets=MULTI_ASSETS,
    kinds={"sentencepiece"},
    resources=("compute", "profile"),
    stage="sentencepiece_model",
    spec=multi_language,
    partitions_def=None,
    group=MULTI_GROUP,
    plan=partial(sentencepiece_model.plan, profile_asset="multi_sentencepiece_model"),
    report=sentencepiece_model.report,
)


def training_data_plan(run: StageRun) -> Plan:
    """The packing of :func:`assets.stages.training_data.plan`, each pair with its language (its
    mining group), the bundle's summary saying how the languages were sampled."""
    registry = load_registry()
    codes = registry.multi_languages()
    sampled = read_record(run.inputs.deduplicated_pairs, MultiPairsRecord)
    return training_data.plan(
        run,
        groups=codes,
        group_kinds=[registry[code].kind for code in codes],
        description={
            "sampling_alpha": sampled.alpha,
            "sampling_seed": sampled.seed,
            "pairs_in": {code: row["pairs_in"] for code, row in sampled.languages.items()},
            "pairs_sampled": {code: row["pairs_out"] for code, row in sampled.languages.items()},
        },
    )


multi_training_data = stage_asset(
    name="multi_training_data",
    description="Shuffle, encode and pack the pairs, each with its language (its mining group).",
    code_version=training_data.CODE_VERSION,
    config=TrainingDataConfig,
    inputs=("deduplicated_pairs", "retrain_plan", "sentencepiece_model"),
    input_assets=MULTI_ASSETS,
    kinds={"hdf5"},
    resources=("compute",),
    checks=[
        CheckSpec(
            training_data.CHECK,
            "The packed file has pairs and no sentence without pieces. Blocking: an empty "
            "sentence has no embedding.",
        )
    ],
    stage="training_data",
    spec=multi_language,
    partitions_def=None,
    group=MULTI_GROUP,
    plan=training_data_plan,
    report=training_data.report,
)


multi_psp_model = stage_asset(
    name="multi_psp_model",
    description="""Train the multilingual model: hard negatives from the whole mega-batch whatever their
    language (each pair by its kind's rule).""",
    code_version="1",
    config=MultiTrainingConfig,
    inputs=("retrain_plan", "sentencepiece_model", "training_data"),
    input_assets=MULTI_ASSETS,
    also_reads=("deduplicated_pairs",),  # (whether the retrain plan is today's)
    kinds={"pytorch"},
    resources=("compute", "eval_data", "profile"),
    checks=[
        CheckSpec(
            psp_model.VOCAB_CHECK,
            "The bundle's embedding table has one row per piece of the shared vocabulary. "
            "Blocking: otherwise ids would index the wrong rows.",
        ),
        CheckSpec(
            psp_model.FINITE_CHECK,
            "Every weight is finite. Blocking: a NaN row makes every sentence with that piece NaN.",
        ),
        psp_model.PROMOTED_CHECK_SPEC,
    ],
    stage="psp_model",
    spec=multi_language,
    partitions_def=None,
    group=MULTI_GROUP,
    loggers=(),
    pool="psp_training",
    plan=partial(psp_model.plan, profile_asset="multi_psp_model"),
    report=psp_model.report,
)


def evaluation_plan(run: StageRun) -> Plan:
    """The suites of every `[multi]` language (:func:`assets.stages.model_evaluation.plan`)."""
    return model_evaluation.plan(run, plan_for_languages(load_registry().multi_languages()))


multi_evaluation = stage_asset(
    name="multi_evaluation",
    description="""Every set the per-language models are evaluated on: each evaluation suite that applies
    to one of its languages, with every subset that does (every STS 2017 track of its languages,
    each language's retrieval set), the English suites, and speed.""",
    code_version="1",
    config=EvaluationConfig,
    inputs=("psp_model",),
    input_assets=MULTI_ASSETS,
    kinds={"json"},
    resources=("eval_data", "profile"),
    stage="model_evaluation",
    spec=multi_language,
    partitions_def=None,
    group=MULTI_GROUP,
    loggers=(),
    plan=evaluation_plan,
    report=model_evaluation.report,
)
