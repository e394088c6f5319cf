"""deduplicated_pairs: lowercased, exact-pair deduplicated (first copy kept), capped per corpus
(a seeded sample of the pairs that passed the filters, as the reference takes its 4M of
OpenSubtitles and MultiUN), less the pairs held back for the dev suite (output ``dev_pairs``, up
to about 2,000, chosen by a hash of each pair so that new bitext moves none of them between
training and development, and every pair sharing a sentence with them: ops.pairs.held_back), with the
training pairs the dev suite retrieves them among (output ``dev_pool``), and for
languages with a pre-tokenizer (zh) segmented with jieba: the text the vocabulary and model see.
A segmented language keeps its unsegmented pairs too (output ``unsegmented``): the multilingual
model applies its own pre-tokenizer to them."""

from dagster import MetadataValue

from assets.framework.metadata import corpora_table, pipeline_funnel_table, report_metadata
from assets.framework.records import DeduplicatedRecord, PairCounts, RawPairsRecord, read_record
from assets.framework.stage import Manifest
from assets.framework.stage_asset import Check, CheckSpec, Plan, Report, StageRun, stage_asset
from assets.settings.config import StageConfig
from ops.cleaning.segmentation import segment_pairs
from ops.pairs.corpus_caps import cap_corpora
from ops.pairs.dedup import deduplicate
from ops.pairs.held_back import hold_back
from ops.pairs.pair_files import has_corpus_column
from ops.stage_report import StageReport

# 3: pairs held back for the dev suite; 4: chosen by their own hash; 5: the dev suite's pool
CODE_VERSION = "5"
#: Seed of the per-corpus cap samples (ops.pairs.corpus_caps).
CAP_SEED = 1234
CHECK = "deduplicated_pairs_not_empty"
#: the held-back pairs of the dev suite (ops.pairs.held_back), beside the training pairs
DEV_PAIRS = "dev_pairs.parquet"
#: the training pairs among which the dev suite retrieves the held-back pairs' translations
DEV_POOL = "dev_pool.parquet"
FUNNEL_STAGES = ("raw_pairs", "langid_filtered_pairs", "length_filtered_pairs")


def _merge(record: dict, later: StageReport) -> dict:
    """Fold a later step's counts into the stage's record (its pairs out, drops, time); the
    step's own report, as the record keeps it."""
    own = later.as_dict()
    record["n_out"] = later.n_out
    record["dropped"] = record["dropped"] | own["dropped"]
    record["seconds"] += own["seconds"]
    return own


def plan(run: StageRun) -> Plan:
    """The registry's corpus caps and pre-tokenizer, the caps' seed."""
    upstream = run.inputs.length_filtered_pairs
    spec, stage = run.spec, run.stage
    caps = {corpus.name: corpus.cap for corpus in spec.corpora if corpus.cap is not None}
    segment = spec.pretokenizer != "none"

    def compute() -> tuple[dict, dict]:
        final = stage.path("pairs.parquet")
        outputs = {"pairs": final.name, "dev_pairs": DEV_PAIRS, "dev_pool": DEV_POOL}
        source = upstream.output("pairs")
        deduplicated = stage.path("deduplicated.parquet")
        record = deduplicate(source, deduplicated).as_dict()
        if has_corpus_column(source):  # caps (a link of the file when nothing is capped)
            capped = stage.path("capped.parquet")
            capped_report = cap_corpora(deduplicated, capped, caps, seed=CAP_SEED)
            deduplicated.unlink()
            deduplicated = capped
            record["caps"] = _merge(record, capped_report)
        # the dev suite's pairs, before the vocabulary or the model see any of their sentences
        training = stage.path("unsegmented.parquet") if segment else final
        held = hold_back(
            deduplicated, training, stage.path(DEV_PAIRS), pool_output=stage.path(DEV_POOL)
        )
        deduplicated.unlink()
        record["held_back"] = _merge(record, held)
        if segment:
            segmented = segment_pairs(
                training,
                final,
                cache_dir=run.storage.cache_dir(),
                workers=run.resource("compute").worker_count(),
                segmenter=spec.pretokenizer,
            ).as_dict()
            outputs["unsegmented"] = training.name
            record["seconds"] += segmented["seconds"]
            record["segmentation"] = segmented
        return outputs, record

    key = {
        "upstream": upstream.fingerprint,
        "pretokenizer": spec.pretokenizer,
        "caps": caps,
        "cap_seed": CAP_SEED,
        # only a segmented language's key names the unsegmented output: an unsegmented
        # language's key, and so its output on disk, stays valid
        **({"keeps_unsegmented": True} if segment else {}),
    }
    return Plan(key, compute)


def report(run: StageRun, plan: Plan, manifest: Manifest) -> Report:
    """The stage's funnel and the chain's so far, the pre-tokenizer and, when corpora were
    capped, each corpus's lines read, pairs passing, cap and pairs kept."""
    record = read_record(manifest, DeduplicatedRecord)
    metadata = report_metadata(manifest, record, "pairs")
    funnel = [(name, read_record(getattr(run.inputs, name), PairCounts)) for name in FUNNEL_STAGES]
    funnel.append((run.stage.name, record))
    metadata["pipeline_funnel"] = pipeline_funnel_table(funnel)
    metadata["pretokenizer"] = MetadataValue.text(run.spec.pretokenizer)
    if record.caps is not None:
        raw = read_record(run.inputs.raw_pairs, RawPairsRecord)
        metadata["corpora"] = corpora_table(raw.lines_read(), record.corpus_caps())
    return Report(metadata, [Check(CHECK, record.n_out > 0, {"pairs_out": record.n_out})])


deduplicated_pairs = stage_asset(
    name="deduplicated_pairs",
    description="Lowercase and drop repeated pairs, cap corpora (seeded samples); segment Chinese.",
    code_version=CODE_VERSION,
    config=StageConfig,
    inputs=("length_filtered_pairs",),
    also_reads=FUNNEL_STAGES,  # (the report's funnel, raw_pairs' corpora)
    kinds={"parquet"},
    resources=("compute",),
    checks=[
        CheckSpec(
            CHECK,
            "At least one pair is left after dedup and the corpus caps. Blocking: "
            "sentencepiece and training need data.",
        )
    ],
    plan=plan,
    report=report,
)
