"""deduplicated_pairs: lowercased, exact-pair deduplicated (first copy kept), capped per corpus
(a seeded sample of the pairs that passed the filters, as the reference takes its 4M of
OpenSubtitles and MultiUN), less the pairs held back for the dev suite (output ``dev_pairs``, up
to 2,000, and every pair sharing a sentence with them: ops.held_back), and for languages with a
pre-tokenizer (zh) segmented with jieba: the text the vocabulary and model see. A segmented language keeps its unsegmented pairs too
(output ``unsegmented``): the multilingual model applies its own pre-tokenizer to them."""

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
from assets.config import StageConfig, op_config, plain_schema
from assets.languages import load_registry
from assets.log_bridge import logs_to_dagster
from assets.metadata import corpora_table, pipeline_funnel_table, report_metadata
from assets.partitions import language_partitions
from assets.resources import ComputeResource, StorageResource
from assets.stage import Stage, fingerprint
from ops.corpus_caps import cap_corpora
from ops.dedup import deduplicate
from ops.held_back import hold_back
from ops.pair_files import has_corpus_column
from ops.segmentation import segment_pairs

CODE_VERSION = "3"  # 3: pairs held back for the dev suite
#: Seed of the per-corpus cap samples (ops.corpus_caps).
CAP_SEED = 1234
CHECK = "deduplicated_pairs_not_empty"
#: the held-back pairs of the dev suite (ops.held_back), beside the training pairs
DEV_PAIRS = "dev_pairs.parquet"
FUNNEL_STAGES = ("raw_pairs", "langid_filtered_pairs", "length_filtered_pairs")


def _merge(record: dict, later: dict) -> None:
    """Fold a later step's counts into the stage's record (its pairs out, drops, time)."""
    record["n_out"] = later["n_out"]
    record["dropped"] = dict(record["dropped"]) | dict(later["dropped"])
    record["seconds"] += later["seconds"]


@asset(
    config_schema=plain_schema(StageConfig),
    partitions_def=language_partitions,
    group_name=DATA_GROUP,
    owners=OWNERS,
    code_version=CODE_VERSION,
    deps=["length_filtered_pairs"],
    kinds={"parquet"},
    check_specs=[
        AssetCheckSpec(
            CHECK,
            asset="deduplicated_pairs",
            blocking=True,
            description="At least one pair is left after dedup and the corpus caps. Blocking: "
            "sentencepiece and training need data.",
        )
    ],
)
def deduplicated_pairs(
    context: AssetExecutionContext,
    storage: StorageResource,
    compute: ComputeResource,
) -> MaterializeResult:
    """Lowercase and drop repeated pairs, cap corpora (seeded samples); segment Chinese."""
    config = op_config(context, StageConfig)
    spec = load_registry()[context.partition_key]
    stage = Stage(storage, spec.code, "deduplicated_pairs")
    upstream = stage.upstream("length_filtered_pairs")
    caps = {corpus.name: corpus.cap for corpus in spec.corpora if corpus.cap is not None}
    segment = spec.pretokenizer != "none"
    # (only a segmented language's key names the unsegmented output: an unsegmented language's
    # key, and so its output on disk, stays valid)
    kept = {"keeps_unsegmented": True} if segment else {}
    key = fingerprint(
        stage=stage.name,
        code=CODE_VERSION,
        upstream=upstream.fingerprint,
        pretokenizer=spec.pretokenizer,
        caps=caps,
        cap_seed=CAP_SEED,
        **kept,
    )

    def run() -> tuple[dict, dict]:
        final = stage.path("pairs.parquet")
        outputs = {"pairs": final.name, "dev_pairs": DEV_PAIRS}
        source = upstream.output("pairs")
        deduplicated = stage.path("deduplicated.parquet")
        record = deduplicate(source, deduplicated).as_dict()
        if has_corpus_column(source):  # caps (a link of the file when nothing is capped)
            capped = stage.path("capped.parquet")
            caps_record = cap_corpora(deduplicated, capped, caps, seed=CAP_SEED).as_dict()
            deduplicated.unlink()
            deduplicated = capped
            _merge(record, caps_record)
            record["caps"] = caps_record
        # the dev suite's pairs, before the vocabulary or the model see any of their sentences
        training = stage.path("unsegmented.parquet") if segment else final
        held = hold_back(deduplicated, training, stage.path(DEV_PAIRS)).as_dict()
        deduplicated.unlink()
        _merge(record, held)
        record["held_back"] = held
        if segment:
            segmented = segment_pairs(
                training,
                final,
                cache_dir=storage.cache_dir(),
                workers=compute.worker_count(),
                segmenter=spec.pretokenizer,
            ).as_dict()
            outputs["unsegmented"] = training.name
            record["seconds"] += segmented["seconds"]
            record["segmentation"] = segmented
        return outputs, record

    with logs_to_dagster(context.log, "ops"):  # the stage's progress lines
        manifest = stage.run(key, run, force=config.force)
    record = manifest.record
    metadata = report_metadata(manifest, record, "pairs")
    funnel = [(name, stage.upstream(name).record) for name in FUNNEL_STAGES]
    funnel.append((stage.name, record))
    metadata["pipeline_funnel"] = pipeline_funnel_table(funnel)
    metadata["pretokenizer"] = MetadataValue.text(spec.pretokenizer)
    if "caps" in record:
        raw = stage.upstream("raw_pairs").record
        lines_read = {
            name: part["n_in"]
            for source in raw.get("parts", [])
            for name, part in source.get("corpora", {}).items()
        }
        metadata["corpora"] = corpora_table(lines_read, record["caps"])
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
