"""Typed run configuration: what a user may tune per run, per stage (``ops: {asset: {config}}``).

Every field left unset (None) takes the run's profile's value (``resources: profile: config:
name: smoke|demo|paper``, see :mod:`assets.settings.profiles`), else the language registry's, which
defaults to the paper's. ``force: true`` recomputes a stage even when its inputs and settings
are unchanged.
"""

from __future__ import annotations

from types import UnionType
from typing import Any, TypeVar, Union, get_args, get_origin

from dagster import (
    Array,
    AssetExecutionContext,
    Bool,
    Config,
    Float,
    Int,
    Map,
    Noneable,
    String,
)
from dagster import Field as DagsterField
from pydantic import Field

from assets.settings.null_defaults import NullMeansDefault, null_default
from psp_core.evaluation.registry import suite_names


class StageConfig(Config, NullMeansDefault):
    force: bool | None = null_default(False, "Recompute even if inputs and settings are unchanged.")


class RawPairsConfig(StageConfig):
    opus_versions: dict[str, str] = Field(
        default_factory=dict,
        description="OPUS corpus name -> version to use instead of the registry's "
        "(the new_bitext_sensor sets this when a corpus has a newer release).",
    )


class LanguageIdConfig(StageConfig):
    threshold: float | None = Field(
        default=None,
        description="Use the 'threshold' rule instead of the registry's: keep a pair only "
        "when both sides are their language with at least this lid.176 probability (null: the "
        "registry's rule, by default 'other_language' for bitext, 'top_label' for ParaNMT).",
    )


class SentencepieceConfig(StageConfig):
    vocab_size: int | None = Field(
        default=None,
        description="Pieces in the vocabulary (null: the profile's, smoke 500, demo 20,000, "
        "paper 50,000). Raised, with a warning, when the script needs more characters.",
    )
    input_sentence_size: int | None = Field(
        default=None, description="Sentences sampled for training (reference code: 10,000,000)."
    )


class RetrainConfig(StageConfig):
    retrain: str | None = null_default(
        "auto",
        "How the next model version is trained: auto (incremental when a promoted version "
        "exists and its vocabulary still fits, else full, and the run log says why), full "
        "(from scratch on every pair, a new vocabulary) or incremental (from the promoted "
        "version's weights and vocabulary, on the pairs it never saw and a replay sample).",
    )


class MultiPairsConfig(StageConfig):
    sampling_alpha: float | None = Field(
        default=None,
        description="Temperature sampling of the languages: each language's share of the pairs "
        "is proportional to n ** alpha (1: the plain union; smaller values favour small "
        "languages). Null: the registry's [multi] sampling_alpha.",
    )


class TrainingDataConfig(StageConfig):
    seed: int | None = null_default(1, "Seeds the shuffle of the packed pairs.")


class TrainingConfig(StageConfig):
    dim: int | None = Field(
        default=None,
        description="Embedding dimension (null: the profile's; paper and demo 1024, smoke 32).",
    )
    epochs: int | None = Field(
        default=None,
        description="Passes over the data (null: the profile's; paper 25, demo and smoke 1).",
    )
    batch_size: int | None = Field(
        default=None,
        description="Pairs per mini-batch (null: the profile's, smoke 32, else the registry's; "
        "paper 128).",
    )
    max_megabatch: int | None = Field(
        default=None,
        description="Largest mega-batch, in mini-batches, that hard negatives are mined from "
        "(null: the profile's, smoke 4, else the registry's; paper: 100 for ParaNMT, 60 or 100 "
        "for bitext).",
    )
    anneal_every: int | None = Field(
        default=None,
        description="The mega-batch grows by one mini-batch every this many steps, from 1 "
        "(null: the profile's, smoke 0, else the registry's; paper 150); 0 starts at "
        "max_megabatch.",
    )
    dropout: float | None = Field(
        default=None,
        description="Dropout on piece embeddings (paper tunes 0, 0.1, 0.3). On a CPU any "
        "dropout trains much slower (every piece vector is masked; "
        "benchmarks/RESULTS.md#train-speed).",
    )
    lr: float | None = Field(
        default=None,
        description="Adam learning rate (null: the profile's; paper 0.001, demo 0.05 for its "
        "single epoch, smoke 0.01).",
    )
    lr_decay: str | None = Field(
        default=None,
        description="'constant' (the paper's: lr throughout) or 'linear' (from lr down to 0 "
        "over the run's epochs; benchmarks/RESULTS.md#train-variants). Null: the profile's "
        "(the demo's multilingual model: linear), else constant.",
    )
    matryoshka_dims: list[int] | None = Field(
        default=None,
        description="Train nested prefixes of the vector to work alone (Matryoshka): the loss "
        "summed over these dimensions and the full one, e.g. [512, 256, 128, 64]; `psp embed "
        "--dim 256` then truncates. Null: the paper's loss.",
    )
    max_steps: int | None = Field(default=None, description="Stop after this many mini-batches.")
    dev_sts: str | None = Field(
        default="sts17/en-en.tsv",
        description="STS file (relative to the evaluation data directory) for model "
        "selection; the best epoch is kept. Null, or a missing file, disables it.",
    )
    select_on_dev_suite: bool = Field(
        default=False,
        description="Keep the epoch with the best dev-suite mean instead (scored after each "
        "epoch: STS 2017 en-en, STS-B dev and the mean retrieval accuracy on the held-back "
        "pairs of the model's languages, each a third; the promotion gate's dev data). "
        "Overrides dev_sts.",
    )

    exports: list[str] = Field(
        default_factory=list,
        description="Also write the model in these formats (sentence-transformers, model2vec) "
        "under psp_model/exports/<format>/, each with the model card; needs the `export` "
        "extra (pip install -e '.[export]').",
    )

    def overrides(self) -> dict:
        names = ("dim", "epochs", "batch_size", "max_megabatch", "anneal_every")
        names += ("dropout", "lr", "lr_decay", "max_steps")
        chosen = {name: getattr(self, name) for name in names if getattr(self, name) is not None}
        if self.matryoshka_dims is not None:
            chosen["matryoshka_dims"] = tuple(self.matryoshka_dims)
        return chosen


class MultiTrainingConfig(TrainingConfig):
    """The multilingual model's training: as a language's, but kept to its last epoch (or
    selected on the dev suite's mean, every language, with ``select_on_dev_suite``), not on STS
    2017 en-en alone."""

    dev_sts: str | None = Field(
        default=None,
        description="STS file (relative to the evaluation data directory) for model "
        "selection; the best epoch is kept. Null (the multilingual model's default) keeps the "
        "last epoch: STS 2017 en-en, the paper's English dev set, picks an early epoch, below "
        "the last on held-back retrieval in most languages (benchmarks/RESULTS.md#multi-model).",
    )
    select_on_dev_suite: bool = Field(
        default=False,
        description="Keep the epoch with the best dev-suite mean (scored after each epoch: "
        "STS 2017 en-en, STS-B dev and the mean retrieval accuracy on the held-back pairs of "
        "every language, each a third). Off by default: over the demo profile's 5 epochs the "
        "mean barely moves after the first few and keeps the last, the model kept without it "
        "(benchmarks/RESULTS.md#multi-model); worth turning on for long runs (the paper "
        "profile's 25 epochs).",
    )


class EvaluationConfig(StageConfig):
    suites: list[str] | None = Field(
        default=None,
        description=f"Any of {', '.join(suite_names())}; null: the paper's evaluation for "
        "the language (en: STS 2012-2016, STS 2017 en-en, STS-B; X: English STS, the STS 2017 "
        "tracks involving X, Tatoeba X), plus speed.",
    )
    sts17_tracks: list[str] | None = Field(
        default=None, description="STS 2017 tracks (es-en, ...); null: the language's tracks."
    )
    tatoeba_languages: list[str] | None = Field(
        default=None, description="LASER codes (deu, fra, ...); null: the language's own."
    )
    speed_repeats: int | None = Field(
        default=None,
        description="Repeats of the embedding-speed measurement; the best is reported "
        "(null: the profile's; paper 3, demo and smoke 1).",
    )


def plain_schema(config_class: type[Config]) -> dict[str, DagsterField]:
    """``config_class``'s fields as a Dagster config schema of plain types (``Int``, ``String``,
    ``Bool``, ``Float``, null where the field allows it), with its defaults and descriptions.

    Given as the asset's ``config_schema`` (the asset reads its values with :func:`op_config`),
    so the launchpad types ``epochs`` as ``Int | null``: Dagster gives every field of a Config
    class ``Int | { env: String }`` (an environment variable's name in place of the value),
    which no stage setting is meant to be read from. Resources keep that form: their paths and
    URLs do come from the environment.
    """
    fields = {}
    for name, info in config_class.model_fields.items():
        default = info.get_default(call_default_factory=True)
        fields[name] = DagsterField(
            _plain_type(info.annotation),
            default_value=default,
            is_required=False,
            description=info.description,
        )
    return fields


def _plain_type(annotation: Any) -> Any:
    if get_origin(annotation) in (Union, UnionType):
        inner = [arg for arg in get_args(annotation) if arg is not type(None)]
        if len(inner) == 1 and len(get_args(annotation)) == 2:
            return Noneable(_plain_type(inner[0]))
    elif get_origin(annotation) is list:
        return Array(_plain_type(get_args(annotation)[0]))
    elif get_origin(annotation) is dict:
        key, value = get_args(annotation)
        return Map(key, _plain_type(value))
    elif annotation in _PLAIN:
        return _PLAIN[annotation]
    raise TypeError(f"no plain Dagster config type for {annotation!r}")


_PLAIN = {bool: Bool, int: Int, float: Float, str: String}

ConfigT = TypeVar("ConfigT", bound=Config)


def op_config(context: AssetExecutionContext, config_class: type[ConfigT]) -> ConfigT:
    """The run's values for an asset whose schema is :func:`plain_schema` of ``config_class``,
    validated into it (null defaults filled in)."""
    return config_class(**(context.op_execution_context.op_config or {}))
