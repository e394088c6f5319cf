"""training_data: the deduplicated pairs shuffled out of core, encoded with the shared
sentencepiece model and packed into the training HDF5 (flat CSR arrays)."""

from collections.abc import Sequence
from contextlib import closing

import h5py
import numpy as np
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
from assets.config import TrainingDataConfig, op_config, plain_schema
from assets.languages import LanguageSpec, load_registry
from assets.log_bridge import logs_to_dagster
from assets.metadata import pipeline_funnel_table, report_metadata
from assets.partitions import language_partitions
from assets.records import PairCounts, SentencepieceRecord, TrainingDataRecord, read_record
from assets.resources import ComputeResource, StorageResource
from assets.stage import Stage, fingerprint
from ops.encoding import encode_and_pack, packing_tokenizer
from ops.heap_release import release_free_memory
from ops.shuffle import shuffled_batches
from ops.stage_report import StageReport

CODE_VERSION = "1"
CHECK = "training_data_has_no_empty_sentences"
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


@asset(
    config_schema=plain_schema(TrainingDataConfig),
    partitions_def=language_partitions,
    group_name=DATA_GROUP,
    owners=OWNERS,
    code_version=CODE_VERSION,
    deps=["deduplicated_pairs", "sentencepiece_model"],
    kinds={"hdf5"},
    check_specs=[
        AssetCheckSpec(
            CHECK,
            asset="training_data",
            blocking=True,
            description="The packed file has pairs and no sentence without pieces. Blocking: an "
            "empty sentence has no embedding, and training would divide by zero.",
        )
    ],
)
def training_data(
    context: AssetExecutionContext,
    storage: StorageResource,
    compute: ComputeResource,
) -> MaterializeResult:
    """Shuffle (seeded, bounded memory), encode and pack the pairs for training."""
    config = op_config(context, TrainingDataConfig)
    spec = load_registry()[context.partition_key]
    return build_training_data(context, spec, config, storage, compute)


def build_training_data(
    context: AssetExecutionContext,
    spec: LanguageSpec,
    config: TrainingDataConfig,
    storage: StorageResource,
    compute: ComputeResource,
    *,
    groups: Sequence[str] = (),
    group_kinds: Sequence[str] = (),
    description: dict | None = None,
) -> MaterializeResult:
    """The packing stage of ``spec``; ``groups``/``group_kinds``: a file of several languages
    (the multilingual model), each pair's group from its ``lang`` column."""
    stage = Stage(storage, spec.code, "training_data")
    pairs = stage.upstream("deduplicated_pairs")
    spm = stage.upstream("sentencepiece_model")
    key = fingerprint(
        stage=stage.name,
        code=CODE_VERSION,
        pairs=pairs.fingerprint,
        spm=spm.fingerprint,
        seed=config.seed,
        kind=spec.kind,
        **({"groups": list(groups), "group_kinds": list(group_kinds)} if groups else {}),
        **({"description": description} if description else {}),
    )

    def run() -> tuple[dict, dict]:
        release_free_memory()  # the previous stages' freed heap back to the OS
        tokenizer = packing_tokenizer(spm.output("model"), num_threads=compute.threads or 2)
        shuffle = StageReport("shuffle")
        # the shuffled rows go straight to the encoding: no shuffled copy of the corpus is
        # written and read back
        shuffled = shuffled_batches(
            pairs.output("pairs"), seed=config.seed, work_dir=stage.directory, report=shuffle
        )
        with closing(shuffled):
            packed = encode_and_pack(
                shuffled,
                tokenizer,
                stage.path("train.h5"),
                lang=spec.code,
                kind=spec.kind,
                seed=config.seed,
                workers=compute.worker_count(),
                total=pairs.record["n_out"],
                groups=groups,
                group_kinds=group_kinds,
                description=description,
            )
        record = packed.as_dict()
        return {"data": "train.h5"}, record | {"shuffle": shuffle.as_dict(), "seed": config.seed}

    with logs_to_dagster(context.log, "ops"):  # the stage's progress lines
        manifest = stage.run(key, run, force=config.force)
    n_pairs, empty = count_empty_sentences(manifest.output("data"))
    record = read_record(manifest, TrainingDataRecord)
    metadata = report_metadata(manifest, record, "data")
    metadata["n_pairs"] = MetadataValue.int(n_pairs)
    metadata["vocab_size"] = MetadataValue.int(read_record(spm, SentencepieceRecord).vocab_size)
    funnel = [
        (name, read_record(stage.upstream(name), PairCounts))
        for name in ("raw_pairs", "langid_filtered_pairs", "length_filtered_pairs")
        if not groups  # the multilingual model's pairs come from every language's chain
    ]
    funnel += [("deduplicated_pairs", read_record(pairs, PairCounts)), ("training_data", record)]
    metadata["pipeline_funnel"] = pipeline_funnel_table(funnel)
    return MaterializeResult(
        metadata=metadata,
        data_version=DataVersion(manifest.fingerprint),
        check_results=[
            AssetCheckResult(
                check_name=CHECK,
                passed=n_pairs > 0 and empty == 0,
                severity=AssetCheckSeverity.ERROR,
                metadata={"pairs": n_pairs, "empty_sentences": empty},
            )
        ],
    )
