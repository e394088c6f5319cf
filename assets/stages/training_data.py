"""training_data: the deduplicated pairs shuffled out of core, encoded with the shared
sentencepiece model and packed into the training HDF5 (flat CSR arrays); for an incremental
retrain (:mod:`assets.stages.retrain_plan`), its new and replayed pairs only."""

from collections.abc import Sequence
from contextlib import closing

import h5py
import numpy as np
from dagster import MetadataValue

from assets.framework.metadata import pipeline_funnel_table, report_metadata
from assets.framework.records import (
    PairCounts,
    RetrainPlanRecord,
    SentencepieceRecord,
    TrainingDataRecord,
    read_record,
)
from assets.framework.stage import Manifest
from assets.framework.stage_asset import Check, CheckSpec, Plan, Report, StageRun, stage_asset
from assets.settings.config import TrainingDataConfig
from assets.stages.deduplicated_pairs import FUNNEL_STAGES
from assets.stages.retrain_plan import current_plan, is_incremental
from ops.heap_release import release_free_memory
from ops.pairs.shuffle import shuffled_batches
from ops.stage_report import StageReport
from ops.training_data.encoding import encode_and_pack, packing_tokenizer

CODE_VERSION = "1"
CHECK = "training_data_has_no_empty_sentences"
#: the language's own chain before deduplicated_pairs, in its funnel
_OFFSET_CHUNK = 1 << 20


def count_empty_sentences(path) -> tuple[int, int]:
    """``(pairs, sentences with no ids)`` of a training HDF5, reading offsets in chunks."""
    with h5py.File(path, "r") as handle:
        n_pairs = int(handle.attrs["n_pairs"])
        empty = 0
        for side in ("src", "tgt"):
            offsets = handle[f"{side}_offsets"]
            for start in range(0, n_pairs, _OFFSET_CHUNK):
                chunk = offsets[start : min(start + _OFFSET_CHUNK, n_pairs) + 1]
                empty += int((np.diff(chunk) <= 0).sum())
    return n_pairs, empty


def plan(
    run: StageRun,
    *,
    groups: Sequence[str] = (),
    group_kinds: Sequence[str] = (),
    description: dict | None = None,
) -> Plan:
    """The shuffle's seed and the language's kind; ``groups``/``group_kinds``: a file of several
    languages (the multilingual model), each pair's group from its ``lang`` column, and
    ``description`` what the bundle's training summary says of them."""
    pairs = run.inputs.deduplicated_pairs
    spm = run.inputs.sentencepiece_model
    spec, stage, seed = run.spec, run.stage, run.config.seed
    compute_resource = run.resource("compute")
    source, n_pairs = pairs.output("pairs"), read_record(pairs, PairCounts).n_out
    retrain = current_plan(run)
    incremental = is_incremental(retrain)
    if incremental:  # the plan's new and replayed pairs
        source = retrain.output("pairs")
        planned = read_record(retrain, RetrainPlanRecord)
        n_pairs = planned.new_pairs + planned.replay_pairs

    def compute() -> tuple[dict, dict]:
        release_free_memory()  # the previous stages' freed heap back to the OS
        tokenizer = packing_tokenizer(
            spm.output("model"), num_threads=compute_resource.threads or 2
        )
        shuffle = StageReport("shuffle")
        # the shuffled rows go straight to the encoding: no shuffled copy of the corpus is
        # written and read back
        shuffled = shuffled_batches(source, seed=seed, work_dir=stage.directory, report=shuffle)
        with closing(shuffled):
            packed = encode_and_pack(
                shuffled,
                tokenizer,
                stage.path("train.h5"),
                lang=spec.code,
                kind=spec.kind,
                seed=seed,
                workers=compute_resource.worker_count(),
                total=n_pairs,
                groups=groups,
                group_kinds=group_kinds,
                description=description,
            )
        record = packed.as_dict()
        return {"data": "train.h5"}, record | {"shuffle": shuffle.as_dict(), "seed": seed}

    key = {
        "pairs": pairs.fingerprint,
        "spm": spm.fingerprint,
        "seed": seed,
        "kind": spec.kind,
        **({"groups": list(groups), "group_kinds": list(group_kinds)} if groups else {}),
        **({"description": description} if description else {}),
        # (a full retrain's key is as it was before incremental retrains existed)
        **({"pairs": retrain.fingerprint, "incremental": True} if incremental else {}),
    }
    return Plan(key, compute, shows={"several_languages": bool(groups)})


def report(run: StageRun, plan: Plan, manifest: Manifest) -> Report:
    """The packed pairs, the vocabulary's size and the chain's funnel; the check that no
    sentence is empty."""
    n_pairs, empty = count_empty_sentences(manifest.output("data"))
    record = read_record(manifest, TrainingDataRecord)
    metadata = report_metadata(manifest, record, "data")
    metadata["n_pairs"] = MetadataValue.int(n_pairs)
    spm = read_record(run.inputs.sentencepiece_model, SentencepieceRecord)
    metadata["vocab_size"] = MetadataValue.int(spm.vocab_size)
    # the multilingual model's pairs come from every language's chain: no one chain's funnel
    earlier = () if plan.shows["several_languages"] else FUNNEL_STAGES
    funnel = [(name, read_record(getattr(run.inputs, name), PairCounts)) for name in earlier]
    funnel += [
        ("deduplicated_pairs", read_record(run.inputs.deduplicated_pairs, PairCounts)),
        ("training_data", record),
    ]
    metadata["pipeline_funnel"] = pipeline_funnel_table(funnel)
    checked = {"pairs": n_pairs, "empty_sentences": empty}
    return Report(metadata, [Check(CHECK, n_pairs > 0 and empty == 0, checked)])


training_data = stage_asset(
    name="training_data",
    description="Shuffle (seeded, bounded memory), encode and pack the pairs for training.",
    code_version=CODE_VERSION,
    config=TrainingDataConfig,
    inputs=("deduplicated_pairs", "retrain_plan", "sentencepiece_model"),
    also_reads=FUNNEL_STAGES,  # (the report's funnel)
    kinds={"hdf5"},
    resources=("compute",),
    checks=[
        CheckSpec(
            CHECK,
            "The packed file has pairs and no sentence without pieces. Blocking: an empty "
            "sentence has no embedding, and training would divide by zero.",
        )
    ],
    plan=plan,
    report=report,
)
