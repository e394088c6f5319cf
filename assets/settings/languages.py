"""The language registry: which languages the pipeline trains, and how, read from TOML.

Each ``[languages.X]`` table of ``languages.toml`` (shipped in the assets package,
``assets/languages.toml``; the ``PSP_LANGUAGES`` environment variable points at another file)
is one Dagster partition. A language names its source (OPUS corpora, ParaNMT, or a local
directory) and may override the paper's filter thresholds, sentencepiece settings and training
hyperparameters given under ``[defaults]``. Unknown keys are errors, so a typo never silently falls back to a default.

A broken ``[languages.X]`` table breaks only X: the other languages load and run, X stays a
partition whose every materialization fails at once with the error (naming the file, the table
and the key), and loading logs a warning. An unreadable file, a broken ``[defaults]`` table or a
file without a usable language fails the load.
"""

from __future__ import annotations

import logging
import os
import re
import tomllib
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, fields
from functools import cache
from pathlib import Path
from typing import Any

from ops.cleaning.filters import FilterConfig
from ops.language_id.langid import DEFAULT_OTHER_P, DEFAULT_OWN_P, DEFAULT_THRESHOLD, LanguageRule
from ops.sources.opus import OpusCorpus, corpora_from_config
from ops.training_data.sentencepiece_model import (
    CHARACTER_COVERAGE,
    INPUT_SENTENCE_SIZE,
    VOCAB_SIZE,
)
from psp_core.tokenization.tokenizer import PRETOKENIZERS
from psp_core.training import TrainConfig

DEFAULT_REGISTRY = Path(__file__).parents[1] / "languages.toml"
REGISTRY_ENV = "PSP_LANGUAGES"
#: a registry's top-level key naming another registry (relative to it) whose [defaults] it
#: inherits: its own [defaults] tables override the inherited ones key by key
INHERIT_DEFAULTS = "inherit_defaults"
SOURCES = ("opus", "paranmt", "local")
KINDS = ("bitext", "paraphrase")
_LANGUAGE_CODE = re.compile(r"^[a-z]{2,3}(_[a-z0-9]+)?$")
_SETTINGS_TABLES = ("filters", "sentencepiece", "training", "promotion", "retrain")
_LANGUAGE_KEYS = {
    "source",
    "kind",
    "corpora",
    "local_dir",
    "pretokenizer",
    "filters",
    "sentencepiece",
    "training",
    "promotion",
    "retrain",
}


log = logging.getLogger(__name__)


class RegistryError(ValueError):
    """The language registry file, or one language's table in it, is malformed."""


class UnknownLanguageError(KeyError):
    """The registry has no table for a language code."""

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else super().__str__()


@dataclass(frozen=True)
class FilterSettings:
    """Language-ID rules and length/score/trigram thresholds: by default the paper's filters,
    as :class:`ops.cleaning.filters.FilterConfig` defines them, and the language-ID rules of
    :class:`ops.language_id.langid.LanguageRule`: ``other_language`` for bitext (a side is dropped only
    when another language has p >= ``langid_other_p`` and its own p < ``langid_own_p``; the
    paper applies no language ID to bitext), ``top_label`` for ParaNMT (the reference's: the
    top label is English on both sides). ``langid_threshold`` is the ``threshold`` rule's
    minimum probability (a plain confidence cut)."""

    bitext_langid_rule: str = "other_language"
    paraphrase_langid_rule: str = "top_label"
    langid_other_p: float = DEFAULT_OTHER_P
    langid_own_p: float = DEFAULT_OWN_P
    langid_threshold: float = DEFAULT_THRESHOLD
    langid_pass_rate_min: float = 0.2
    langid_pass_rate_max: float = 1.0
    bitext_min_tokens: int = FilterConfig.bitext_min_tokens
    bitext_max_tokens: int = FilterConfig.bitext_max_tokens
    paraphrase_min_mean_tokens: float = FilterConfig.paraphrase_min_mean_tokens
    paraphrase_max_mean_tokens: float = FilterConfig.paraphrase_max_mean_tokens
    min_score: float = FilterConfig.min_score
    max_score: float = FilterConfig.max_score
    max_trigram_overlap: float = FilterConfig.max_trigram_overlap

    def __post_init__(self) -> None:
        for kind in KINDS:
            self.langid_rule(kind)  # raises ValueError on an unknown rule or a bad probability

    def langid_rule(self, kind: str) -> LanguageRule:
        """The :class:`ops.language_id.langid.LanguageRule` for ``kind`` (``bitext`` or ``paraphrase``)."""
        return LanguageRule(
            self.bitext_langid_rule if kind == "bitext" else self.paraphrase_langid_rule,
            other_p=self.langid_other_p,
            own_p=self.langid_own_p,
            threshold=self.langid_threshold,
        )

    def filter_config(self) -> FilterConfig:
        """The :class:`ops.cleaning.filters.FilterConfig` these thresholds describe."""
        names = {f.name for f in fields(FilterConfig)}
        return FilterConfig(**{k: v for k, v in self.__dict__.items() if k in names})


@dataclass(frozen=True)
class SentencepieceSettings:
    """The shared sentencepiece vocabulary (paper: unigram, 50k, coverage 0.995, 10M sample).
    ``byte_fallback``: a character outside the vocabulary is pieced as its UTF-8 bytes (256
    pieces of the vocabulary) instead of an unknown piece (benchmarks/RESULTS.md#unknown-text)."""

    vocab_size: int = VOCAB_SIZE
    character_coverage: float = CHARACTER_COVERAGE
    input_sentence_size: int = INPUT_SENTENCE_SIZE
    byte_fallback: bool = False

    def plan_settings(self) -> dict:
        """The settings a vocabulary is trained with (``byte_fallback`` only where it is on: a
        registry that never set it keeps its stages' fingerprints)."""
        settings = asdict(self)
        if not settings["byte_fallback"]:
            del settings["byte_fallback"]
        return settings


@dataclass(frozen=True)
class PromotionSettings:
    """The promotion gate of a language's model versions (:mod:`assets.promotion`): a new
    version is promoted when none of its dev scores is more than ``tolerance`` points below
    the promoted version's; the newest ``keep_versions`` versions are kept, and the promoted
    one and its rollback target whatever their age."""

    tolerance: float = 1.0
    keep_versions: int = 5

    def __post_init__(self) -> None:
        if not self.tolerance >= 0:
            raise ValueError(f"tolerance must be >= 0, got {self.tolerance}")
        if self.keep_versions < 1:
            raise ValueError(f"keep_versions must be >= 1, got {self.keep_versions}")


@dataclass(frozen=True)
class RetrainSettings:
    """How the pipeline retrains a language's model (:mod:`assets.stages.retrain_plan`): with
    ``retrain: auto``, a full retrain after ``full_every`` incremental versions in a row; an
    incremental retrain replays seen pairs so that they make ``replay_share`` of its training
    pairs, at ``lr_scale`` times the learning rate of a full training (unless the run sets
    ``lr``): its optimizer starts afresh on weights already trained, and at the full rate the
    chain of versions forgets what it learnt. The defaults were chosen on weeks of arriving
    bitext (benchmarks/RESULTS.md#retrain-weeks)."""

    full_every: int = 4
    replay_share: float = 0.5
    lr_scale: float = 0.3
    #: ``"multi"``: a full retrain of a language's model starts from the promoted multilingual
    #: model's weights and vocabulary (from random weights and a vocabulary of its own where
    #: there is none); None: from random weights (benchmarks/RESULTS.md#init-from-multi)
    init_from: str | None = None

    def __post_init__(self) -> None:
        if self.full_every < 1:
            raise ValueError(f"full_every must be >= 1, got {self.full_every}")
        if not 0.0 <= self.replay_share < 1.0:
            raise ValueError(f"replay_share must be in [0, 1), got {self.replay_share}")
        if not 0.0 < self.lr_scale <= 1.0:
            raise ValueError(f"lr_scale must be in (0, 1], got {self.lr_scale}")
        if self.init_from not in (None, "multi"):
            raise ValueError(f'init_from must be "multi" or absent, got {self.init_from!r}')

    def plan_settings(self) -> dict:
        """The settings that decide a retrain plan (``init_from`` only where it is set: a plan
        of a registry that never set it keeps its fingerprint)."""
        settings = asdict(self)
        if settings["init_from"] is None:
            del settings["init_from"]
        return settings


@dataclass(frozen=True)
class LanguageSpec:
    """Everything the pipeline needs to know about one language partition."""

    code: str
    source: str
    kind: str
    corpora: tuple[OpusCorpus, ...] = ()
    local_dir: str | None = None
    pretokenizer: str = "none"
    filters: FilterSettings = field(default_factory=FilterSettings)
    sentencepiece: SentencepieceSettings = field(default_factory=SentencepieceSettings)
    training: Mapping[str, Any] = field(default_factory=dict)
    promotion: PromotionSettings = field(default_factory=PromotionSettings)
    retrain: RetrainSettings = field(default_factory=RetrainSettings)
    #: where each of ``training``'s values was set (``FILE [defaults.training]``, ...)
    training_origins: Mapping[str, str] = field(default_factory=dict)

    def train_config(self, **overrides: Any) -> TrainConfig:
        """The :class:`psp_core.TrainConfig` for this language, with per-run ``overrides``."""
        return TrainConfig(**{**self.training, **overrides})

    def describe_sources(self) -> dict[str, Any]:
        """A JSON-ready description of the configured source (for metadata and hashing)."""
        return {
            "source": self.source,
            "corpora": [
                {"name": c.name, "version": c.version, "cap": c.cap, "codes": dict(c.codes or {})}
                for c in self.corpora
            ],
            "local_dir": self.local_dir,
        }


#: the multilingual model's code: its stages' directory and its name (never a language code)
MULTI = "multi"
#: temperature sampling's exponent: p ∝ n^alpha, chosen on the dev suite, where 0.5 had the
#: best dev mean of the values tried (benchmarks/RESULTS.md#multi-model)
DEFAULT_SAMPLING_ALPHA = 0.5
_MULTI_KEYS = {
    "languages",
    "sampling_alpha",
    "pretokenizer",
    "sentencepiece",
    "training",
    "promotion",
    "retrain",
}


@dataclass(frozen=True)
class MultiSpec:
    """The multilingual model: one vocabulary and one model for the pairs of ``languages``
    (empty: every usable language of the registry), each language's pairs drawn with
    probability proportional to ``n ** sampling_alpha``; ``pretokenizer`` applies to every
    sentence (default ``none``: raw text, Chinese too; ``rjieba_han``: jieba on Chinese-script
    runs only)."""

    languages: tuple[str, ...] = ()
    sampling_alpha: float = DEFAULT_SAMPLING_ALPHA
    pretokenizer: str = "none"
    sentencepiece: SentencepieceSettings = field(default_factory=SentencepieceSettings)
    training: Mapping[str, Any] = field(default_factory=dict)
    promotion: PromotionSettings = field(default_factory=PromotionSettings)
    retrain: RetrainSettings = field(default_factory=RetrainSettings)
    training_origins: Mapping[str, str] = field(default_factory=dict)

    def as_language(self) -> LanguageSpec:
        """A :class:`LanguageSpec` for the stages the multilingual model shares with the
        per-language chain (vocabulary, model, evaluation): code ``multi``, mixed kinds."""
        return LanguageSpec(
            code=MULTI,
            source=MULTI,
            kind="mixed",
            pretokenizer=self.pretokenizer,
            sentencepiece=self.sentencepiece,
            training=self.training,
            promotion=self.promotion,
            retrain=self.retrain,
            training_origins=self.training_origins,
        )


@dataclass(frozen=True)
class LanguageRegistry:
    """The languages of one registry file: the usable ones, and the broken tables' errors."""

    languages: Mapping[str, LanguageSpec]
    path: Path
    errors: Mapping[str, str] = field(default_factory=dict)
    order: tuple[str, ...] = ()
    multi: MultiSpec = field(default_factory=MultiSpec)

    def multi_languages(self) -> list[str]:
        """The languages the multilingual model is trained on, in registry order.

        Raises:
            RegistryError: one of them has a broken table (the message says which).
        """
        codes = list(self.multi.languages) or [c for c in self.codes if c not in self.errors]
        for code in codes:
            self[code]  # a broken table raises its own error
        return codes

    @property
    def codes(self) -> list[str]:
        """Every language of the file in file order, broken ones included (each is a partition)."""
        return list(self.order or (*self.languages, *self.errors))

    def __getitem__(self, code: str) -> LanguageSpec:
        """The language's spec.

        Raises:
            RegistryError: its table is broken (the message names the file, table and key).
            UnknownLanguageError: the file has no table for it.
        """
        if code in self.errors:
            raise RegistryError(self.errors[code])
        try:
            return self.languages[code]
        except KeyError:
            raise UnknownLanguageError(
                f"language {code!r} is not in the registry {self.path} (it has "
                f"{', '.join(self.codes)}); add a [languages.{code}] table"
            ) from None


def _settings(cls: type, values: Mapping[str, Any], where: str) -> Any:
    known = {f.name for f in fields(cls)}
    unknown = set(values) - known
    if unknown:
        raise RegistryError(f"{where}: unknown keys {sorted(unknown)}; expected {sorted(known)}")
    try:
        return cls(**values)
    except (TypeError, ValueError) as err:
        raise RegistryError(f"{where}: {err}") from err


def _table(value: Any, where: str) -> Mapping[str, Any]:
    if not isinstance(value, dict):
        raise RegistryError(f"{where}: expected a table, got {value!r}")
    return value


def _language(
    code: str, table: Any, defaults: Mapping, origins: Origins, path: Path
) -> LanguageSpec:
    where = f"{path} [languages.{code}]"
    if not _LANGUAGE_CODE.match(code):
        raise RegistryError(f"{where}: {code!r} is not a language code (like de, zh or pt_br)")
    table = _table(table, where)
    unknown = set(table) - _LANGUAGE_KEYS
    if unknown:
        raise RegistryError(
            f"{where}: unknown keys {sorted(unknown)}; expected {sorted(_LANGUAGE_KEYS)}"
        )
    source = table.get("source")
    if source not in SOURCES:
        raise RegistryError(f"{where}: source must be one of {SOURCES}, got {source!r}")
    kind = table.get("kind", "paraphrase" if source == "paranmt" else "bitext")
    if kind not in KINDS or (source == "paranmt") != (kind == "paraphrase"):
        raise RegistryError(
            f"{where}: kind {kind!r} does not fit source {source!r} (paranmt gives "
            "paraphrase data, opus and local give bitext)"
        )
    if kind == "bitext" and code == "en":
        raise RegistryError(f"{where}: en-en bitext makes no sense; use source = 'paranmt'")
    corpora: tuple[OpusCorpus, ...] = ()
    if source == "opus":
        try:
            corpora = tuple(corpora_from_config(table.get("corpora", [])))
        except ValueError as err:
            raise RegistryError(f"{where}: {err}") from err
        if not corpora:
            raise RegistryError(f"{where}: source 'opus' needs a non-empty corpora list")
    elif "corpora" in table:
        raise RegistryError(f"{where}: corpora are only used with source = 'opus'")
    local_dir = table.get("local_dir")
    if (source == "local") != (local_dir is not None):
        raise RegistryError(f"{where}: local_dir is required with source = 'local', and only then")
    pretokenizer = table.get("pretokenizer", "none")
    if pretokenizer not in PRETOKENIZERS:
        raise RegistryError(f"{where}: pretokenizer must be one of {PRETOKENIZERS}")
    own = {
        name: _table(table.get(name, {}), f"{path} [languages.{code}.{name}]")
        for name in _SETTINGS_TABLES
    }
    training = {**defaults.get("training", {}), **own["training"]}
    train_fields = {f.name for f in fields(TrainConfig)}
    unknown_training = set(training) - train_fields
    if unknown_training:
        raise RegistryError(
            f"{path} [languages.{code}.training]: unknown keys {sorted(unknown_training)}; "
            f"TrainConfig has {sorted(train_fields)}"
        )
    try:
        TrainConfig(**training)
    except (TypeError, ValueError) as err:
        raise RegistryError(
            f"{path} [languages.{code}.training]: invalid training settings: {err}"
        ) from err
    return LanguageSpec(
        code=code,
        source=source,
        kind=kind,
        corpora=corpora,
        local_dir=local_dir,
        pretokenizer=pretokenizer,
        filters=_settings(
            FilterSettings,
            {**defaults.get("filters", {}), **own["filters"]},
            f"{path} [languages.{code}.filters]",
        ),
        sentencepiece=_settings(
            SentencepieceSettings,
            {**defaults.get("sentencepiece", {}), **own["sentencepiece"]},
            f"{path} [languages.{code}.sentencepiece]",
        ),
        training=training,
        promotion=_settings(
            PromotionSettings,
            {**defaults.get("promotion", {}), **own["promotion"]},
            f"{path} [languages.{code}.promotion]",
        ),
        retrain=_settings(
            RetrainSettings,
            {**defaults.get("retrain", {}), **own["retrain"]},
            f"{path} [languages.{code}.retrain]",
        ),
        training_origins={
            **origins.get("training", {}),
            **dict.fromkeys(own["training"], f"{path} [languages.{code}.training]"),
        },
    )


Origins = dict[str, dict[str, str]]  # table -> key -> where its value was set


def _inherited(data: Mapping[str, Any], path: Path, seen: frozenset[Path]) -> tuple[dict, Origins]:
    """The ``[defaults]`` (and where each value was set) of the registry ``data`` inherits
    (:data:`INHERIT_DEFAULTS`), recursively; empty when it inherits none."""
    if INHERIT_DEFAULTS not in data:
        return {}, {}
    name = data[INHERIT_DEFAULTS]
    if not isinstance(name, str) or not name:
        raise RegistryError(f"{path}: {INHERIT_DEFAULTS} must be a registry file's path")
    parent = path.parent / name
    if parent.resolve() in seen:
        raise RegistryError(f"{path}: {INHERIT_DEFAULTS} = {name!r} inherits from itself")
    if not parent.is_file():
        raise RegistryError(f"{path}: {INHERIT_DEFAULTS} = {name!r}: {parent} does not exist")
    try:
        parent_data = tomllib.loads(parent.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as err:
        raise RegistryError(
            f"{parent} (inherited by {path}): not a readable registry ({err})"
        ) from err
    return _defaults(parent_data, parent, seen | {parent.resolve()})


def _defaults(
    data: Mapping[str, Any], path: Path, seen: frozenset[Path] = frozenset()
) -> tuple[dict[str, Mapping[str, Any]], Origins]:
    """The ``[defaults.*]`` tables, checked (their errors concern every language), over those
    of the registry it inherits, and where each value was set."""
    tables, origins = _inherited(data, path, seen | {path.resolve()})
    own = _table(data.get("defaults", {}), f"{path} [defaults]")
    unknown = set(own) - set(_SETTINGS_TABLES)
    if unknown:
        raise RegistryError(f"{path}: unknown [defaults] tables {sorted(unknown)}")
    for name in own:
        values = _table(own.get(name, {}), f"{path} [defaults.{name}]")
        tables[name] = {**tables.get(name, {}), **values}
        origins[name] = {
            **origins.get(name, {}),
            **dict.fromkeys(values, f"{path} [defaults.{name}]"),
        }
    for name, cls in (
        ("filters", FilterSettings),
        ("sentencepiece", SentencepieceSettings),
        ("promotion", PromotionSettings),
        ("retrain", RetrainSettings),
    ):
        _settings(cls, tables.get(name, {}), f"{path} [defaults.{name}]")
    train_fields = {f.name for f in fields(TrainConfig)}
    unknown_training = set(tables.get("training", {})) - train_fields
    if unknown_training:
        raise RegistryError(
            f"{path} [defaults.training]: unknown keys {sorted(unknown_training)}; "
            f"TrainConfig has {sorted(train_fields)}"
        )
    return tables, origins


def parse_registry(text: str, path: Path) -> LanguageRegistry:
    """Parse registry TOML ``text`` (``path`` only names it in errors).

    A broken ``[languages.X]`` table is kept as X's error (see :class:`LanguageRegistry`).

    Raises:
        RegistryError: the file is not TOML, has unknown or broken top-level or ``[defaults]``
            tables, or no usable language (the message then lists every table's error).
    """
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as err:
        raise RegistryError(f"{path}: not valid TOML ({err})") from err
    unknown = set(data) - {"defaults", "languages", MULTI, INHERIT_DEFAULTS}
    if unknown:
        raise RegistryError(f"{path}: unknown top-level tables {sorted(unknown)}")
    defaults, origins = _defaults(data, path)
    tables = _table(data.get("languages", {}), f"{path} [languages]")
    if not tables:
        raise RegistryError(f"{path}: no [languages.X] tables; the pipeline needs at least one")
    languages: dict[str, LanguageSpec] = {}
    errors: dict[str, str] = {}
    for code, table in tables.items():
        try:
            languages[code] = _language(code, table, defaults, origins, path)
        except RegistryError as err:
            errors[code] = str(err)
        except (TypeError, ValueError, AttributeError) as err:  # a value of the wrong type
            errors[code] = f"{path} [languages.{code}]: {type(err).__name__}: {err}"
    if not languages:
        raise RegistryError(
            f"{path}: no usable language; fix these tables:\n" + "\n".join(errors.values())
        )
    multi = _multi(data.get(MULTI, {}), defaults, origins, path, tuple(tables))
    return LanguageRegistry(languages, path, errors, tuple(tables), multi)


def _multi(
    table: Any, defaults: Mapping, origins: Origins, path: Path, codes: tuple[str, ...]
) -> MultiSpec:
    """The ``[multi]`` table (the multilingual model); every key optional."""
    where = f"{path} [{MULTI}]"
    table = _table(table, where)
    unknown = set(table) - _MULTI_KEYS
    if unknown:
        raise RegistryError(
            f"{where}: unknown keys {sorted(unknown)}; expected {sorted(_MULTI_KEYS)}"
        )
    languages = table.get("languages", [])
    if not isinstance(languages, list) or not all(isinstance(c, str) for c in languages):
        raise RegistryError(f"{where}: languages must be a list of language codes")
    missing = [code for code in languages if code not in codes]
    if missing:
        raise RegistryError(
            f"{where}: languages {missing} have no [languages.X] table (the file has "
            f"{', '.join(codes)})"
        )
    alpha = table.get("sampling_alpha", DEFAULT_SAMPLING_ALPHA)
    if not isinstance(alpha, int | float) or not 0.0 <= alpha <= 1.0:
        raise RegistryError(f"{where}: sampling_alpha must be a number in [0, 1], got {alpha!r}")
    pretokenizer = table.get("pretokenizer", "none")
    if pretokenizer not in PRETOKENIZERS:
        raise RegistryError(f"{where}: pretokenizer must be one of {PRETOKENIZERS}")
    own_training = _table(table.get("training", {}), where)
    training = {**defaults.get("training", {}), **own_training}
    try:
        TrainConfig(**training)
    except (TypeError, ValueError) as err:
        raise RegistryError(f"{where}.training: invalid training settings: {err}") from err
    sentencepiece = _settings(
        SentencepieceSettings,
        {**defaults.get("sentencepiece", {}), **_table(table.get("sentencepiece", {}), where)},
        f"{where}.sentencepiece",
    )
    promotion = _settings(
        PromotionSettings,
        {**defaults.get("promotion", {}), **_table(table.get("promotion", {}), where)},
        f"{where}.promotion",
    )
    if "init_from" in _table(table.get("retrain", {}), where):
        raise RegistryError(f"{where}.retrain: init_from is a language's setting")
    own = {**defaults.get("retrain", {}), **_table(table.get("retrain", {}), where)}
    own.pop("init_from", None)  # (the multilingual model starts from no model)
    retrain = _settings(RetrainSettings, own, f"{where}.retrain")
    return MultiSpec(
        tuple(languages),
        float(alpha),
        pretokenizer,
        sentencepiece,
        training,
        promotion,
        retrain,
        {**origins.get("training", {}), **dict.fromkeys(own_training, f"{where}.training")},
    )


def registry_path() -> Path:
    """``$PSP_LANGUAGES`` if set, else the shipped ``languages.toml``."""
    return Path(os.environ.get(REGISTRY_ENV) or DEFAULT_REGISTRY)


@cache
def _load_cached(path: Path) -> LanguageRegistry:
    if not path.is_file():
        raise RegistryError(f"language registry {path} does not exist (from ${REGISTRY_ENV}?)")
    registry = parse_registry(path.read_text(encoding="utf-8"), path)
    for code, error in registry.errors.items():
        log.warning(
            "%s; language %r cannot run until this is fixed (the others are not affected)",
            error,
            code,
        )
    return registry


def load_registry(path: str | Path | None = None) -> LanguageRegistry:
    """Read (once per path) the language registry at ``path`` or :func:`registry_path`."""
    return _load_cached(Path(path) if path else registry_path())
