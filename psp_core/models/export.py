"""Export a model bundle to sentence-transformers or model2vec.

A P-SP model is a static embedding model (the mean of sentencepiece piece embeddings), which is
what sentence-transformers' ``StaticEmbedding`` and model2vec's ``StaticModel`` compute. The
sentencepiece model is rebuilt as a Hugging Face ``tokenizers`` tokenizer: a Unigram model with
the same pieces and scores, sentencepiece's own normalization table (``precompiled_charsmap``,
e.g. nmt_nfkc; NFKC when the model has none) after a Lowercase normalizer, and a Metaspace
pre-tokenizer. Differences from :meth:`psp_core.inference.model.PSPModel.embed`, which leave the cosine
the same for all but a few sentences (how few: benchmarks/RESULTS.md#export-agreement):

* psp_core drops unknown pieces. model2vec drops the unknown id too; sentence-transformers
  cannot, so its unknown row is exported as zeros: the mean then has the same direction and a
  smaller norm. A sentence with no known piece (only unknown pieces and the bare word-boundary
  piece sentencepiece puts before them) has nothing to embed in psp_core (a zero vector); the
  exports keep the boundary piece, so there it gets that piece's direction.
* psp_core truncates to ``max_length`` pieces after dropping unknown pieces, the exports before
  (the tokenizer's truncation); model2vec also cuts the text at ``max_length`` times the median
  piece length in characters first. Only sentences longer than ``max_length`` pieces can differ.
* Viterbi ties between segmentations of equal score may be broken differently.
* The Lowercase normalizer lowercases character by character (no final-sigma rule).

Bundles whose tokenization cannot be reproduced raise :class:`ExportError` naming the feature
(a pre-tokenizer such as jieba, a non-Unigram sentencepiece model, ...). A vocabulary with
byte fallback exports with it: a character outside the pieces becomes its UTF-8 bytes' pieces
in both.

Needs the optional extra ``export`` (``pip install .[export]``): ``tokenizers``, and
``sentence-transformers`` or ``model2vec`` for the format chosen.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from psp_core.files.output_dirs import directory_written_then_replaced
from psp_core.files.output_files import check_output_directory, os_error_code, write_error
from psp_core.models.bundle import load_bundle
from psp_core.models.hub import is_hub_id, model_folder
from psp_core.models.model_card import CARD_FILE, model_card, retarget_card
from psp_core.tokenization.sentencepiece_spec import (
    _BYTE,
    _MODEL_TYPES,
    _NORMAL,
    _UNIGRAM,
    _UNKNOWN,
    SentencePieceSpec,
    SpecError,
)

FORMATS = ("sentence-transformers", "model2vec")

# Pieces that sentencepiece never matches in text get a name no pre-tokenized text can contain
# (the Metaspace pre-tokenizer turns every space into "▁"), so the Unigram model cannot match them
_UNMATCHABLE_SUFFIX = " (psp: not matched in text)"


class ExportError(ValueError):
    """A bundle cannot be exported (faithfully) to the requested format."""


def _spec(spm_proto: bytes) -> SentencePieceSpec:
    try:
        return SentencePieceSpec.parse(spm_proto)
    except SpecError as error:
        raise ExportError(str(error)) from error


def _unsupported(spec: SentencePieceSpec, pretokenizer: str) -> list[str]:
    """The features of a bundle that the exported tokenizer cannot reproduce."""
    problems = []
    if pretokenizer != "none":
        problems.append(
            f"pre-tokenizer {pretokenizer!r} (e.g. jieba word segmentation for Chinese) runs in "
            "Python before sentencepiece and has no Hugging Face tokenizers equivalent"
        )
    if spec.model_type != _UNIGRAM:
        kind = _MODEL_TYPES.get(spec.model_type, str(spec.model_type))
        problems.append(f"sentencepiece model type {kind!r} (only unigram is converted)")
    if spec.treat_whitespace_as_suffix:
        problems.append("sentencepiece treat_whitespace_as_suffix")
    if spec.split_digits:
        problems.append("sentencepiece split_digits (digits as pieces of their own)")
    if not spec.escape_whitespaces:
        problems.append("sentencepiece escape_whitespaces=false")
    if not spec.remove_extra_whitespaces:
        problems.append("sentencepiece remove_extra_whitespaces=false")
    if spec.user_defined:
        problems.append("sentencepiece user-defined pieces (matched before Viterbi)")
    if not any(kind == _UNKNOWN for _, _, kind in spec.pieces):
        problems.append("a sentencepiece model without an unknown piece")
    return problems


def _exported_piece(piece: str, score: float, kind: int, lowest: float) -> tuple[str, float]:
    """A piece of the exported Unigram model. A byte piece (``<0xF0>``, with byte fallback)
    keeps its name, which the Unigram model looks up for a character it cannot piece, and a
    score far below every other piece's, so that Viterbi prefers matching a literal "<0xF0>"
    in a text as characters, as sentencepiece does (it never matches a byte piece in text),
    wherever the vocabulary has those characters (with one it lacks, the Unigram model's
    penalty for an unknown character, which it derives from the lowest score, makes the byte
    piece win); other pieces that sentencepiece never matches get a name no text can contain."""
    if kind == _NORMAL:
        return piece, score
    if kind == _BYTE:
        return piece, lowest - 1000.0
    return piece + _UNMATCHABLE_SUFFIX, score


def build_tokenizer(spm_proto: bytes, *, lowercase: bool = True, max_length: int = 100):
    """A ``tokenizers.Tokenizer`` that segments like psp_core's :class:`~psp_core.tokenization.tokenizer.
    Tokenizer` (without a pre-tokenizer); raises :class:`ExportError` when it cannot."""
    tokenizers = _require("tokenizers")
    from tokenizers import Regex, normalizers, pre_tokenizers
    from tokenizers.models import Unigram

    spec = _spec(spm_proto)
    problems = _unsupported(spec, "none")
    if problems:
        raise ExportError("cannot export: " + "; ".join(problems))
    lowest = min((score for _, score, kind in spec.pieces if kind == _NORMAL), default=0.0)
    vocab = [_exported_piece(piece, score, kind, lowest) for piece, score, kind in spec.pieces]
    tokenizer = tokenizers.Tokenizer(
        Unigram(vocab, unk_id=spec.unk_id, byte_fallback=spec.byte_fallback)
    )
    steps = [normalizers.Lowercase()] if lowercase else []
    if spec.precompiled_charsmap:
        steps.append(normalizers.Precompiled(spec.precompiled_charsmap))
    elif spec.normalizer_name not in ("identity", ""):
        steps.append(normalizers.NFKC())
    # sentencepiece's remove_extra_whitespaces: no leading or trailing spaces, runs of one
    steps += [normalizers.Strip(), normalizers.Replace(Regex(" {2,}"), " ")]
    tokenizer.normalizer = normalizers.Sequence(steps)
    # one Viterbi pass over the whole sentence, as sentencepiece does (split=True would run one
    # per word, which breaks ties differently)
    tokenizer.pre_tokenizer = pre_tokenizers.Metaspace(
        replacement="▁", prepend_scheme="always" if spec.add_dummy_prefix else "never", split=False
    )
    if max_length > 0:
        tokenizer.enable_truncation(max_length)
    tokenizer.no_padding()
    return tokenizer


def _require(module: str):
    import importlib

    try:
        return importlib.import_module(module)
    except ImportError as error:
        raise ImportError(
            f"exporting needs the {module!r} package ({error}); install the optional extra "
            "`export`: pip install 'psp-pipeline[export]'"
        ) from error


EXPORT_RECORD = "psp_export.json"


def is_export_directory(directory: str | Path) -> bool:
    """Whether ``directory`` is an earlier export (its ``psp_export.json`` names a format): the
    marker that lets an export replace it."""
    try:
        data = json.loads((Path(directory) / EXPORT_RECORD).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return isinstance(data, dict) and data.get("format") in FORMATS


def check_export_output(
    output: str | Path, bundle_dir: str | Path, *, overwrite: bool = False
) -> Path:
    """Refuse, before any work, an export folder that is a file, is the bundle (or contains it,
    or lies inside it), or is an existing folder of other files (unless ``overwrite``)."""
    return check_output_directory(
        output,
        "export folder",
        is_ours=is_export_directory,
        ours=f"an earlier export (no {EXPORT_RECORD})",
        overwrite=overwrite,
        inputs=(bundle_dir,),
    )


def export_model(
    bundle_dir: str | Path,
    format: str,
    output: str | Path,
    *,
    record: Mapping[str, Any] | None = None,
    overwrite: bool = False,
) -> Path:
    """Write the bundle at ``bundle_dir`` as a ``format`` model folder at ``output``.

    ``format`` is ``"sentence-transformers"`` (``SentenceTransformer(output)`` loads it) or
    ``"model2vec"`` (``StaticModel.from_pretrained(output)`` loads it). An earlier export at
    ``output`` is replaced: the new folder is complete before it swaps names with the old one
    (:func:`psp_core.files.output_dirs.replace_directory`). A folder of other files, the bundle
    itself or a folder holding it are refused (:class:`~psp_core.files.output_files.OutputError`)
    before any work; ``overwrite`` lifts the first refusal only. The export carries the
    bundle's model card (``README.md``, naming the target library) and ``psp_export.json``
    (what it was made from, plus ``record``), and its files get the umask's modes. Returns
    ``output``.
    """
    if format not in FORMATS:
        raise ValueError(f"unknown export format {format!r}; expected one of {list(FORMATS)}")
    check_export_output(output, bundle_dir, overwrite=overwrite)
    # a Hub model is named by its id, a folder by its name (never a machine's path)
    source = str(bundle_dir) if is_hub_id(bundle_dir) else Path(bundle_dir).name
    bundle_dir = model_folder(bundle_dir)  # (a Hub model fetched once the output is checked)
    config, spm_proto, embeddings = load_bundle(bundle_dir)
    spec = _spec(spm_proto)
    problems = _unsupported(spec, config.pretokenizer)
    if problems:
        raise ExportError(
            f"cannot export {bundle_dir} to {format}: its tokenization cannot be reproduced by a "
            "Hugging Face tokenizer: " + "; ".join(problems)
        )
    tokenizer = build_tokenizer(spm_proto, lowercase=config.lowercase, max_length=config.max_length)
    weights = np.array(embeddings, dtype=np.float32, copy=True)
    output = Path(output)
    card = Path(bundle_dir) / CARD_FILE
    text = card.read_text(encoding="utf-8") if card.is_file() else model_card(config)
    made_from = {
        "format": format,
        # the bundle by its content, never its path (an export is published: no machine's
        # folder names in it)
        "source_bundle": source,
        "source_files": config.files,
        "spm_sha256": config.spm_sha256,
        "dim": config.dim,
        "vocab_size": config.vocab_size,
        "lowercase": config.lowercase,
        "max_length": config.max_length,
        **(record or {}),
    }
    with directory_written_then_replaced(output) as tmp:
        try:
            if format == "sentence-transformers":
                _write_sentence_transformers(tmp, tokenizer, weights, spec.unk_id)
            else:
                _write_model2vec(tmp, tokenizer, weights, config.max_length, config.languages)
            (tmp / CARD_FILE).write_text(retarget_card(text, format), encoding="utf-8")
            # last: a folder with this record is a complete export
            (tmp / EXPORT_RECORD).write_text(json.dumps(made_from, indent=2) + "\n")
        except Exception as error:
            if os_error_code(error) is None:
                raise
            raise write_error(output, error) from error
    return output


def _write_sentence_transformers(path: Path, tokenizer, weights: np.ndarray, unk_id: int) -> None:
    _require("sentence_transformers")
    import torch
    from sentence_transformers import SentenceTransformer

    try:
        from sentence_transformers.sentence_transformer.modules import StaticEmbedding
    except ImportError:  # sentence-transformers < 6
        from sentence_transformers.models import StaticEmbedding

    # EmbeddingBag averages every id, the unknown one included: a zero row keeps the direction
    # of psp_core's mean over the known pieces (only the norm shrinks)
    weights[unk_id] = 0.0
    module = StaticEmbedding(tokenizer, embedding_weights=torch.from_numpy(weights))
    SentenceTransformer(modules=[module], device="cpu").save(str(path))


def _write_model2vec(
    path: Path, tokenizer, weights: np.ndarray, max_length: int, languages: list[str]
) -> None:
    _require("model2vec")
    from model2vec import StaticModel

    # model2vec drops the unknown id itself, so the table is exported unchanged
    model = StaticModel(
        weights,
        tokenizer,
        config={"model_type": "model2vec", "architectures": ["StaticModel"], "hidden_dim": 0},
        normalize=False,
        language=languages or None,
        max_length=max_length if max_length > 0 else None,
    )
    model.config["hidden_dim"] = int(weights.shape[1])
    model.save_pretrained(path)
