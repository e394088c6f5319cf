"""The preparation chain for one language partition: raw pairs -> training HDF5.

Stages, in order (DESIGN section 3), each writing ``work_dir/<stage>.<ext>`` atomically:

==========  ==============================================  =====================
stage       function                                        output
==========  ==============================================  =====================
langid      :func:`ops.langid.filter_language`              ``langid.parquet``
filters     :func:`ops.filters.filter_pairs`                ``filters.parquet``
dedup       :func:`ops.dedup.deduplicate` (lowercases)      ``dedup.parquet``
segment     :func:`ops.segmentation.segment_pairs` (zh)     ``segment.parquet``
shuffle     :func:`ops.shuffle.shuffle_pairs`               ``shuffle.parquet``
spm         :func:`ops.sentencepiece_model.train_sentencepiece_from_pairs`  ``spm.model``
pack        :func:`ops.encoding.encode_and_pack`            ``pack.h5``
==========  ==============================================  =====================

Resuming: after a stage finishes, ``work_dir/<stage>.report.json`` records its counts, its
parameters and the size and modification time of its inputs and its output. A stage is skipped
when its output and report exist, and the parameters, inputs and output are unchanged; otherwise it
runs again, which changes its output and so makes every later stage run again too. A run that was
killed therefore resumes at the first stage without a complete output.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ops.dedup import deduplicate
from ops.encoding import encode_and_pack, packing_tokenizer
from ops.filters import FilterConfig, filter_pairs
from ops.langid import DEFAULT_THRESHOLD, LanguageIdentifier, filter_language
from ops.memory import release_free_memory
from ops.pair_files import pair_file_info
from ops.segmentation import segment_pairs
from ops.sentencepiece_model import (
    CHARACTER_COVERAGE,
    INPUT_SENTENCE_SIZE,
    VOCAB_SIZE,
    train_sentencepiece_from_pairs,
)
from ops.shuffle import DEFAULT_BUCKET_ROWS, shuffle_pairs
from ops.stage_report import StageReport
from ops.text_io import atomic_path

log = logging.getLogger(__name__)

STAGES = ("langid", "filters", "dedup", "segment", "shuffle", "spm", "pack")
_EXTENSIONS = {"spm": ".model", "pack": ".h5"}


def stage_output(work_dir: str | Path, stage: str) -> Path:
    """Where ``stage`` writes its output inside ``work_dir``."""
    if stage not in STAGES:
        raise ValueError(f"unknown stage {stage!r}; expected one of {STAGES}")
    return Path(work_dir) / f"{stage}{_EXTENSIONS.get(stage, '.parquet')}"


def needs_segmentation(lang: str) -> bool:
    """Chinese (``zh``, ``zh_cn``, ``zh-tw``...) is jieba-segmented before sentencepiece."""
    return lang.lower().split("_")[0].split("-")[0] == "zh"


@dataclass
class PreparedCorpus:
    """What :func:`prepare_corpus` did: a report and an output path per stage that applies."""

    reports: dict[str, StageReport] = field(default_factory=dict)
    paths: dict[str, Path] = field(default_factory=dict)
    skipped: list[str] = field(default_factory=list)

    @property
    def training_file(self) -> Path:
        return self.paths["pack"]

    @property
    def spm_model(self) -> Path:
        return self.paths["spm"]

    def as_dict(self) -> dict[str, Any]:
        return {
            "reports": {stage: report.as_dict() for stage, report in self.reports.items()},
            "paths": {stage: str(path) for stage, path in self.paths.items()},
            "skipped": list(self.skipped),
        }


def prepare_corpus(
    raw_pairs: str | Path,
    work_dir: str | Path,
    *,
    lang: str,
    kind: str,
    identifier: LanguageIdentifier,
    filter_config: FilterConfig | None = None,
    vocab_size: int = VOCAB_SIZE,
    seed: int = 0,
    langid_threshold: float = DEFAULT_THRESHOLD,
    character_coverage: float = CHARACTER_COVERAGE,
    input_sentence_size: int = INPUT_SENTENCE_SIZE,
    num_threads: int = 2,
    workers: int = 1,
    bucket_rows: int = DEFAULT_BUCKET_ROWS,
) -> PreparedCorpus:
    """Run langid -> filters -> dedup -> (zh: segment) -> shuffle -> spm -> pack on ``raw_pairs``.

    Args:
        raw_pairs: the partition's raw pair file (``src_lang``/``tgt_lang`` metadata set).
        work_dir: where every stage's output and report go; a re-run resumes there.
        lang: the partition (``de``, ``zh``...; ``en`` for ParaNMT), recorded in the HDF5.
        kind: ``"bitext"`` or ``"paraphrase"`` (selects the length/score filters).
        identifier: the fastText language identifier.
        filter_config: filter thresholds (default: the paper's).
        vocab_size, character_coverage, input_sentence_size: sentencepiece settings.
        seed: the shuffle order and the sentencepiece sample.
        num_threads: sentencepiece threads for training, and for encoding when ``workers <= 1``.
        workers: processes for language ID, jieba segmentation and encoding (libraries that use
            one core or hold the GIL); the files they write do not depend on it.
        bucket_rows: rows per shuffle bucket (memory is about one bucket).

    Returns:
        The per-stage reports, the output paths (``training_file`` and ``spm_model`` among them)
        and the stages that were skipped because their output was already complete.
    """
    raw_pairs = Path(raw_pairs)
    work_dir = Path(work_dir)
    if not raw_pairs.is_file():
        raise FileNotFoundError(f"raw pair file {raw_pairs} does not exist; run the source first")
    filter_config = filter_config or FilterConfig()
    work_dir.mkdir(parents=True, exist_ok=True)
    result = PreparedCorpus()

    def run(
        stage: str, inputs: list[Path], params: dict[str, Any], body: Callable[[Path], Any]
    ) -> Path:
        output = stage_output(work_dir, stage)
        result.paths[stage] = output
        # through JSON, so that tuples compare equal to the lists they are saved as
        record = json.loads(
            json.dumps({"params": params, "inputs": {str(p): _fingerprint(p) for p in inputs}})
        )
        saved = _load_record(output)
        if (
            saved is not None
            and all(saved.get(key) == value for key, value in record.items())
            and saved.get("output") == _fingerprint(output)
        ):
            log.info("stage %s: %s is complete, skipping", stage, output)
            result.reports[stage] = _report_from_dict(saved["report"])
            result.skipped.append(stage)
            return output
        log.info("stage %s: writing %s", stage, output)
        started = time.perf_counter()
        report = body(output)
        # the next stage starts from this process's base, not from this stage's peak
        release_free_memory()
        if not isinstance(report, StageReport):  # spm returns the model path
            n_pairs = pair_file_info(inputs[0])[0]
            report = StageReport(stage, n_in=n_pairs, n_out=n_pairs).finish()
            report.seconds = time.perf_counter() - started
        result.reports[stage] = report
        with atomic_path(_record_path(output)) as tmp:
            saved = {**record, "output": _fingerprint(output), "report": report.as_dict()}
            tmp.write_text(json.dumps(saved, indent=2))
        return output

    current = run(
        "langid",
        [raw_pairs],
        {"model": str(getattr(identifier, "model_path", None)), "threshold": langid_threshold},
        lambda out: filter_language(
            raw_pairs, out, identifier=identifier, threshold=langid_threshold, workers=workers
        ),
    )
    previous = current
    current = run(
        "filters",
        [previous],
        {"kind": kind, "config": dataclasses.asdict(filter_config)},
        lambda out: filter_pairs(previous, out, kind=kind, config=filter_config),
    )
    previous = current
    current = run("dedup", [previous], {}, lambda out: deduplicate(previous, out))
    if needs_segmentation(lang):
        previous = current
        current = run(
            "segment",
            [previous],
            {"pretokenizer": "jieba"},
            lambda out: segment_pairs(
                previous, out, cache_dir=work_dir / "jieba-cache", workers=workers
            ),
        )
    previous = current
    shuffled = run(
        "shuffle",
        [previous],
        {"seed": seed, "bucket_rows": bucket_rows},
        lambda out: shuffle_pairs(
            previous, out, seed=seed, work_dir=work_dir, bucket_rows=bucket_rows
        ),
    )
    spm_params = {
        "vocab_size": vocab_size,
        "character_coverage": character_coverage,
        "input_sentence_size": input_sentence_size,
        "seed": seed,
    }
    spm_model = run(
        "spm",
        [shuffled],
        spm_params,
        lambda out: train_sentencepiece_from_pairs(
            shuffled, out, num_threads=num_threads, **spm_params
        ),
    )

    def pack(out: Path) -> StageReport:
        tokenizer = packing_tokenizer(spm_model, num_threads=num_threads)
        return encode_and_pack(
            shuffled, tokenizer, out, lang=lang, kind=kind, seed=seed, workers=workers
        )

    run("pack", [shuffled, spm_model], {"lang": lang, "kind": kind, "seed": seed}, pack)
    return result


def _record_path(output: Path) -> Path:
    return output.with_name(output.name.rsplit(".", 1)[0] + ".report.json")


def _fingerprint(path: Path) -> list[int]:
    stat = os.stat(path)
    return [stat.st_size, stat.st_mtime_ns]


def _load_record(output: Path) -> dict[str, Any] | None:
    """The saved record of a completed stage, or None when it must run (again)."""
    record_path = _record_path(output)
    if not (output.exists() and record_path.is_file()):
        return None
    try:
        return json.loads(record_path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as error:
        log.warning("%s is unreadable (%s); running the stage again", record_path, error)
        return None


def _report_from_dict(data: dict[str, Any]) -> StageReport:
    return StageReport(
        stage=data["stage"],
        n_in=data["n_in"],
        n_out=data["n_out"],
        dropped=Counter(data["dropped"]),
        seconds=data["seconds"],
    )
