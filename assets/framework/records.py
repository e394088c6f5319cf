"""Typed views of the records stages keep in ``manifest.json``.

A stage's ``compute`` writes its record as a JSON-able dict (an ops ``StageReport.as_dict()``
plus the stage's own fields); the asset code reads it back through :func:`read_record` as one
of the dataclasses below, by attribute. Reading changes nothing on disk: the JSON keeps its
shape, keys a class does not name are kept in :attr:`Record.extra`, and fields that older
manifests lack have defaults, so a manifest written by any earlier version still reads.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar, Self, TypeVar

from assets.framework.stage import Manifest

R = TypeVar("R", bound="Record")


@dataclass(frozen=True, kw_only=True)
class Record:
    """A stage's record; keys its class does not name are kept, as they were, in ``extra``."""

    #: optional fields that a record made here writes even when None (the manifest's shape)
    written_when_none: ClassVar[frozenset[str]] = frozenset()

    extra: dict[str, Any] = field(default_factory=dict, repr=False)
    #: the keys the record was read with (:meth:`as_dict` writes those back, no more)
    read_keys: frozenset[str] = field(default=frozenset(), repr=False, compare=False)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Self:
        names = {f.name for f in dataclasses.fields(cls)} - {"extra", "read_keys"}
        known = {key: value for key, value in data.items() if key in names}
        extra = {key: value for key, value in data.items() if key not in names}
        return cls(**known, extra=extra, read_keys=frozenset(data))

    def as_dict(self) -> dict[str, Any]:
        """The record as ``manifest.json`` holds it: a record read from one gives back the keys
        it was read with; one made here its fields, less the optional ones that are None (but
        those of :attr:`written_when_none`)."""
        named = {
            f.name: getattr(self, f.name)
            for f in dataclasses.fields(self)
            if f.name not in ("extra", "read_keys")
            and (
                f.name in self.read_keys
                if self.read_keys
                else not (
                    f.default is None
                    and getattr(self, f.name) is None
                    and f.name not in self.written_when_none
                )
            )
        }
        return named | self.extra


def read_record(manifest: Manifest, kind: type[R]) -> R:
    """``manifest``'s record as ``kind``."""
    return kind.from_dict(manifest.record)


@dataclass(frozen=True, kw_only=True)
class PairCounts(Record):
    """What a stage that reads pairs and writes pairs did (ops' ``StageReport``): pairs in, out,
    dropped per reason, its time, and the pairs out that carry a note (``unscored``: ParaNMT
    pairs without a score), by note."""

    n_in: int
    n_out: int
    dropped: dict[str, int] = field(default_factory=dict)
    seconds: float = 0.0
    notes: dict[str, int] = field(default_factory=dict)

    @property
    def pass_rate(self) -> float:
        """The share of the input kept (0 for no input)."""
        return self.n_out / self.n_in if self.n_in else 0.0


@dataclass(frozen=True, kw_only=True)
class SourceCounts(PairCounts):
    """One source's counts within raw_pairs: an OPUS corpus (with the release and the
    language code read), a local file or an inbox file."""

    version: str | None = None
    opus_code: str | None = None


@dataclass(frozen=True, kw_only=True)
class RawPairsRecord(PairCounts):
    """raw_pairs: the counts summed over its sources, each source's report, and the sources."""

    parts: list[dict[str, Any]] = field(default_factory=list)
    sources: dict[str, Any] = field(default_factory=dict)

    def source_counts(self) -> list[tuple[str, SourceCounts]]:
        """Each source's name and counts: every OPUS corpus of a part that read several, and
        every other part under its own stage name (two parts may share one)."""
        return [
            (name, SourceCounts.from_dict(report))
            for part in self.parts
            for name, report in (part.get("corpora") or {part["stage"]: part}).items()
        ]

    def lines_read(self) -> dict[str, int]:
        """Line pairs read per corpus (the OPUS corpora's names)."""
        return {
            name: part["n_in"]
            for source in self.parts
            for name, part in source.get("corpora", {}).items()
        }


@dataclass(frozen=True, kw_only=True)
class LanguageIdRecord(PairCounts):
    """langid_filtered_pairs: the counts and the rule applied (its settings)."""

    rule: dict[str, Any] | None = None


@dataclass(frozen=True, kw_only=True)
class CorpusCap(Record):
    """One corpus in the caps step: its pairs passing every filter, its cap (None: none), the
    pairs kept."""

    passing: int
    kept: int
    cap: int | None = None


@dataclass(frozen=True, kw_only=True)
class DeduplicatedRecord(PairCounts):
    """deduplicated_pairs: the counts of its steps together, and each later step's own report
    (the corpus caps, the pairs held back for the dev suite, the segmentation), when it ran."""

    caps: dict[str, Any] | None = None
    held_back: dict[str, Any] | None = None
    segmentation: dict[str, Any] | None = None

    def corpus_caps(self) -> dict[str, CorpusCap]:
        """Each corpus's passing pairs, cap and pairs kept (empty when nothing was capped)."""
        corpora = (self.caps or {}).get("corpora", {})
        return {name: CorpusCap.from_dict(counts) for name, counts in corpora.items()}


@dataclass(frozen=True, kw_only=True)
class SentencepieceRecord(Record):
    """sentencepiece_model: the settings it was trained with, the vocabulary it got (raised
    above the requested size when the script needs more characters), the model's hash."""

    settings: dict[str, Any]
    vocab_size: int
    sha256: str
    seconds: float = 0.0

    @property
    def requested_vocab_size(self) -> int:
        return int(self.settings["vocab_size"])


@dataclass(frozen=True, kw_only=True)
class TrainingDataRecord(PairCounts):
    """training_data: the encoding's counts, the shuffle's report and its seed."""

    shuffle: dict[str, Any] | None = None
    seed: int | None = None


@dataclass(frozen=True, kw_only=True)
class MultiPairsRecord(PairCounts):
    """multi_pairs: the temperature sample's exponent and seed, and per language its kind,
    pairs in, pairs out, share, whole copies and pairs sampled."""

    alpha: float
    seed: int
    languages: dict[str, dict[str, Any]] = field(default_factory=dict)


@dataclass(frozen=True, kw_only=True)
class ModelRecord(Record):
    """psp_model: the training's history (per epoch), steps, the epoch kept and its dev score
    (None without model selection), why the bundle holds the final epoch's weights instead
    where the kept epoch's table was found damaged, the dev STS file or suite it selected on,
    the bundle's sizes, the settings, its time and the version it is (absent in older
    manifests)."""

    history: list[dict[str, Any]] = field(default_factory=list)
    steps: int = 0
    best_epoch: int | None = None
    best_dev_score: float | None = None
    best_epoch_unavailable: str | None = None
    dev_sts: str | None = None
    model_selection: str | None = None
    dim: int = 0
    vocab_size: int = 0
    settings: dict[str, Any] = field(default_factory=dict)
    #: where each setting was set (the code, the registry, the profile, the run config, ...)
    settings_from: dict[str, str] = field(default_factory=dict)
    seconds: float | None = None
    training_window: list[float] | None = None
    loss_curve: list[Any] | None = None
    version: str | None = None

    # (the version is added by the plan once the registry has given it an id)
    written_when_none: ClassVar[frozenset[str]] = frozenset(
        {
            "best_epoch",
            "best_dev_score",
            "best_epoch_unavailable",
            "dev_sts",
            "model_selection",
            "seconds",
            "training_window",
            "loss_curve",
        }
    )


@dataclass(frozen=True, kw_only=True)
class RetrainPlanRecord(Record):
    """retrain_plan: the deduplicated pairs it was made for (``upstream``), the version it
    considered continuing (``candidate``) and the run's ``retrain`` setting; the mode decided
    (``full`` or ``incremental``), the parent an incremental retrain continues, the rule and its
    reason; the new, replayed and lineage pairs, the seen pairs and the vocabulary's fit; the
    multilingual version a full retrain starts from (``init_from``) and why."""

    upstream: str | None = None
    candidate: str | None = None
    setting: str | None = None
    mode: str = "full"
    parent: str | None = None
    rule: str | None = None
    reason: str = ""
    new_pairs: int = 0
    replay_pairs: int = 0
    lineage_pairs: int = 0
    seen_pairs: int | None = None
    vocabulary_fit: dict[str, Any] | None = None
    init_from: str | None = None
    init_from_reason: str | None = None
    seconds: float | None = None

    written_when_none: ClassVar[frozenset[str]] = frozenset({"candidate", "parent"})

    @property
    def incremental(self) -> bool:
        return self.mode == "incremental"


@dataclass(frozen=True, kw_only=True)
class EvaluationRecord(Record):
    """model_evaluation: the STS mean (and what it is over when not the paper's years), the dev
    STS file, the STS 2017 tracks, the speed and the sets missing from the evaluation data."""

    sts_mean: dict[str, Any] | None = None
    sts_mean_note: str | None = None
    dev_sts: str | None = None

    written_when_none: ClassVar[frozenset[str]] = frozenset(
        {"sts_mean", "sts_mean_note", "dev_sts"}
    )
    sts17: dict[str, dict[str, Any]] = field(default_factory=dict)
    speed: dict[str, Any] = field(default_factory=dict)
    missing: list[str] = field(default_factory=list)
