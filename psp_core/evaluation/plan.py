"""Which evaluations apply to a language's model, and one scoreboard across languages.

The paper evaluates its English model on STS 2012-2016 (and selects on STS 2017 en-en), and each
en-X bitext model on English STS, the STS 2017 tracks involving X and Tatoeba X->en / en->X.
:func:`plan_for_language` turns that into suites, STS 2017 tracks and Tatoeba languages;
:func:`scoreboard_markdown` renders several languages' ``EvaluationResults.to_dict()`` side by
side with the paper's numbers.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from psp_core.evaluation.coverage import DevDataset, dev_dataset, sts_coverage
from psp_core.evaluation.results import (
    PAPER_STS17,
    PAPER_STS_MEAN,
    PAPER_STS_MEAN_YEARS,
    PAPER_TATOEBA,
)
from psp_core.evaluation.sts import STS17_TRACKS

#: ISO 639-1 (our partition codes, region suffix ignored) -> LASER's Tatoeba 3-letter codes.
LASER_CODES: dict[str, str] = {
    "ar": "ara", "bg": "bul", "de": "deu", "el": "ell", "es": "spa", "fr": "fra", "he": "heb",
    "hi": "hin", "it": "ita", "ja": "jpn", "ko": "kor", "nl": "nld", "pl": "pol", "pt": "por",
    "ru": "rus", "tr": "tur", "uk": "ukr", "vi": "vie", "zh": "cmn",
}  # fmt: skip


@dataclass(frozen=True)
class EvaluationPlan:
    """What to run for one language: suites, STS 2017 tracks, Tatoeba languages."""

    suites: tuple[str, ...]
    sts17_tracks: tuple[str, ...]
    tatoeba_languages: tuple[str, ...]


def _base(lang: str) -> str:
    return lang.strip().lower().replace("-", "_").split("_")[0]


def plan_for_language(lang: str) -> EvaluationPlan:
    """The paper's evaluation of the model of partition ``lang``.

    ``en`` (paraphrase data): STS 2012-2016, STS 2017 en-en, STS Benchmark, speed. Any other
    language X: STS 2012-2016 (English), the STS 2017 tracks with an X column, Tatoeba X (when
    LASER has it) and speed.
    """
    base = _base(lang)
    if base == "en":
        return EvaluationPlan(("sts", "sts17", "stsb", "speed"), ("en-en",), ())
    tracks = tuple(t.name for t in STS17_TRACKS if base in (t.first_language, t.second_language))
    tatoeba = (LASER_CODES[base],) if base in LASER_CODES else ()
    suites = ("sts",) + (("sts17",) if tracks else ()) + (("tatoeba",) if tatoeba else ())
    return EvaluationPlan(suites + ("speed",), tracks, tatoeba)


def plan_for_languages(langs: list[str] | tuple[str, ...]) -> EvaluationPlan:
    """The evaluation of one model trained on several languages (the multilingual model): the
    union of their plans, with the English suites (STS 2012-2016, STS 2017 en-en, STS-B) always
    in, so the multilingual model is compared with every per-language model on its own sets."""
    plans = [plan_for_language(lang) for lang in ("en", *langs)]
    suites = sorted({suite for plan in plans for suite in plan.suites} - {"speed"})
    tracks = sorted({track for plan in plans for track in plan.sts17_tracks})
    tatoeba = sorted({code for plan in plans for code in plan.tatoeba_languages})
    if tatoeba and "tatoeba" not in suites:
        suites.append("tatoeba")
    return EvaluationPlan((*suites, "speed"), tuple(tracks), tuple(tatoeba))


def _cell(value: float | None, paper: float | None = None) -> str:
    text = "-" if value is None else f"{value:.1f}"
    return text if paper is None else f"{text} ({paper:.1f})"


def scoreboard_rows(results: Mapping[str, Mapping[str, Any]]) -> list[dict[str, Any]]:
    """One flat row per language from ``{lang: EvaluationResults.to_dict()}``.

    ``sts_mean_note`` says what the STS mean is over when that is less than the paper's
    2012-2016 (``over 2012-2014 (2015, 2016 absent; 2013 without SMT)``); ``dev_sts`` is the
    file the model was selected on (its STS 2017 track or STS-B split is marked dev).
    """
    rows = []
    for lang, result in sorted(results.items()):
        sts = result.get("sts") or {}
        sts_mean = sts.get("mean")
        dev = dev_dataset(result.get("dev_sts"))
        coverage = sts_coverage(
            {year: list(names) for year, names in (sts.get("datasets") or {}).items()}, dev
        )
        speed = result.get("speed") or {}
        rows.append(
            {
                "lang": lang,
                "sts_mean_pearson": sts_mean["pearson"] if sts_mean else None,
                "sts_years": list(coverage.years),
                "sts_mean_note": coverage.mean_note() if sts_mean else None,
                "dev_sts": result.get("dev_sts"),
                "sts17_pearson": {k: v["pearson"] for k, v in result.get("sts17", {}).items()},
                "sts17_dev": dev.name if dev and dev.suite == "sts17" else None,
                "stsb_dev_pearson": (result.get("stsb", {}).get("dev") or {}).get("pearson"),
                "stsb_dev_is_dev_set": dev == DevDataset("stsb", "dev"),
                "tatoeba_error": {
                    k: {"cosine": v["cosine_mean"], "margin": v["margin_mean"]}
                    for k, v in result.get("tatoeba", {}).items()
                },
                "sentences_per_s": speed.get("with_tokenization"),
                "missing": list(result.get("missing", [])),
            }
        )
    return rows


@dataclass(frozen=True)
class Scoreboard:
    """Every language's evaluation side by side, read once: :func:`scoreboard_rows`,
    the multilingual model beside the per-language models (``compared``), and both as
    markdown."""

    rows: list[dict[str, Any]]
    compared: list[dict[str, Any]]
    markdown: str
    comparison_markdown: str


def scoreboard(results: Mapping[str, Mapping[str, Any]], model: str = "multi") -> Scoreboard:
    rows = scoreboard_rows(results)
    compared = _compare(rows, model)
    return Scoreboard(rows, compared, _board_markdown(rows), _comparison_markdown(compared, model))


def scoreboard_markdown(results: Mapping[str, Mapping[str, Any]]) -> str:
    """A markdown table across languages; the paper's P-SP numbers in parentheses, its STS
    mean in a column of its own labelled by the years it covers. A row's STS mean says what it
    is over when that is less than the paper's; the dev set's STS 2017 track is marked dev."""
    return _board_markdown(scoreboard_rows(results))


def _board_markdown(rows: list[dict[str, Any]]) -> str:
    lines = [
        f"| lang | STS mean (Pearson) | paper STS {PAPER_STS_MEAN_YEARS} mean "
        "| STS 2017 Pearson (paper) | STS-B dev split "
        "| Tatoeba error % cosine (paper) / margin | sentences/s |",
        "|---|---|---:|---|---:|---|---:|",
    ]
    for row in rows:
        sts = _cell(row["sts_mean_pearson"])
        if row["sts_mean_note"]:
            sts += f" {row['sts_mean_note']}"
        elif row["sts_years"]:
            sts += f" over {PAPER_STS_MEAN_YEARS}"
        sts17 = ", ".join(
            f"{track} (dev) {_cell(value)}"
            if track == row["sts17_dev"]
            else f"{track} {_cell(value, PAPER_STS17.get(track))}"
            for track, value in sorted(row["sts17_pearson"].items())
        )
        stsb = _cell(row["stsb_dev_pearson"]) + (" (dev)" if row["stsb_dev_is_dev_set"] else "")
        tatoeba = ", ".join(
            f"{code} {_cell(v['cosine'], PAPER_TATOEBA.get(code))} / {_cell(v['margin'])}"
            for code, v in sorted(row["tatoeba_error"].items())
        )
        speed = "-" if row["sentences_per_s"] is None else f"{row['sentences_per_s']:,.0f}"
        lines.append(
            f"| {row['lang']} | {sts} | {PAPER_STS_MEAN:.1f} | {sts17 or '-'} | {stsb} | "
            f"{tatoeba or '-'} | {speed} |"
        )
    return "\n".join(lines)


def _comparison_sets(row: Mapping[str, Any]) -> list[tuple[str, Any, bool]]:
    """``(label, value of a scoreboard row, higher is better)`` for every set of ``row``."""
    sets: list[tuple[str, Any, bool]] = [
        ("STS mean (Pearson)", lambda r: r["sts_mean_pearson"], True),
        ("STS-B dev (Pearson)", lambda r: r["stsb_dev_pearson"], True),
    ]
    for track in sorted(row["sts17_pearson"]):
        label = f"STS 2017 {track} (Pearson)" + (" (dev)" if track == row["sts17_dev"] else "")
        sets.append((label, lambda r, t=track: r["sts17_pearson"].get(t), True))
    for code in sorted(row["tatoeba_error"]):
        sets.append(
            (
                f"Tatoeba {code} error % (cosine)",
                lambda r, c=code: (r["tatoeba_error"].get(c) or {}).get("cosine"),
                False,
            )
        )
    return sets


def _compare(board: list[dict[str, Any]], model: str) -> list[dict[str, Any]]:
    """``model`` (the multilingual model) beside the per-language models, one row per set it
    was evaluated on: ``set``, ``score``, the best per-language model (``best_model``,
    ``best_score``) and ``better_by`` (positive: ``model`` is better; for Tatoeba, error rates,
    the sign is turned so that positive still means better). Empty when ``model`` has no
    results."""
    rows = {row["lang"]: row for row in board}
    ours = rows.pop(model, None)
    if ours is None:
        return []
    compared = []
    for label, value_of, higher in _comparison_sets(ours):
        value = value_of(ours)
        scored = [(value_of(row), lang) for lang, row in rows.items() if value_of(row) is not None]
        best, lang = (max(scored) if higher else min(scored)) if scored else (None, None)
        gain = None
        if value is not None and best is not None:
            gain = value - best if higher else best - value
        compared.append(
            {
                "set": label,
                "score": value,
                "best_model": lang,
                "best_score": best,
                "better_by": gain,
            }
        )
    return compared


def comparison_markdown(results: Mapping[str, Mapping[str, Any]], model: str = "multi") -> str:
    """``model`` (the multilingual model) beside the per-language models as a markdown table
    (empty when ``model`` has no results)."""
    return _comparison_markdown(_compare(scoreboard_rows(results), model), model)


def _comparison_markdown(compared: list[dict[str, Any]], model: str) -> str:
    if not compared:
        return ""
    lines = [
        f"| set | {model} | best per-language model | its score | {model} better by |",
        "|---|---:|---|---:|---:|",
    ]
    for row in compared:
        gain = "-" if row["better_by"] is None else f"{row['better_by']:+.1f}"
        lines.append(
            f"| {row['set']} | {_cell(row['score'])} | {row['best_model'] or '-'} "
            f"| {_cell(row['best_score'])} | {gain} |"
        )
    return "\n".join(lines)
