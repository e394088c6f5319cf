"""Which evaluations apply to a language's model, and one scoreboard across languages.

The paper evaluates its English model on STS 2012-2016 (and selects on STS 2017 en-en), and each
en-X bitext model on English STS, the STS 2017 tracks involving X and retrieval X->en / en->X.
:func:`plan_for_language` asks each registered suite which of its subsets apply
(:meth:`~psp_core.evaluation.suite.Suite.subsets_for`); :func:`scoreboard_markdown` renders
several languages' ``EvaluationResults.to_dict()`` side by side with the paper's numbers, each
suite its own columns.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from psp_core.evaluation.registry import dev_dataset, registered


@dataclass(frozen=True)
class EvaluationPlan:
    """What to run for one language: the suites, in the registry's order, and the subsets of
    those that have subsets to choose (suite name -> subsets; ``()`` where none apply)."""

    suites: tuple[str, ...]
    subsets: Mapping[str, tuple[str, ...]] = field(default_factory=dict)

    def subsets_of(self, suite: str) -> tuple[str, ...]:
        return tuple(self.subsets.get(suite, ()))


def _base(lang: str) -> str:
    return lang.strip().lower().replace("-", "_").split("_")[0]


def plan_for_language(lang: str) -> EvaluationPlan:
    """The paper's evaluation of the model of partition ``lang``: the suites that apply to it
    and their subsets.

    ``en`` (paraphrase data): STS 2012-2016, STS 2017 en-en, STS Benchmark, speed. Any other
    language X: STS 2012-2016 (English), the STS 2017 tracks with an X column, retrieval of X (when
    LASER has it) and speed.
    """
    base = _base(lang)
    suites, subsets = [], {}
    for name, each in registered().items():
        chosen = each.subsets_for(base)
        if chosen is not None:
            suites.append(name)
        if each.subset_option:
            subsets[name] = tuple(chosen or ())
    return EvaluationPlan(tuple(suites), subsets)


def plan_for_languages(langs: list[str] | tuple[str, ...]) -> EvaluationPlan:
    """The evaluation of one model trained on several languages (the multilingual model): the
    union of their plans, with the English suites (STS 2012-2016, STS 2017 en-en, STS-B) always
    in, so the multilingual model is compared with every per-language model on its own sets."""
    plans = [plan_for_language(lang) for lang in ("en", *langs)]
    suites = {suite for plan in plans for suite in plan.suites}
    subsets = {
        name: tuple(sorted({s for plan in plans for s in plan.subsets_of(name)}))
        for name, each in registered().items()
        if each.subset_option
    }
    suites |= {name for name, chosen in subsets.items() if chosen}
    return EvaluationPlan(tuple(name for name in registered() if name in suites), subsets)


def scoreboard_rows(results: Mapping[str, Mapping[str, Any]]) -> list[dict[str, Any]]:
    """One flat row per language from ``{lang: EvaluationResults.to_dict()}``: ``lang``,
    ``dev_sts`` (the file the model was selected on), ``missing``, and each suite's fields
    (:meth:`~psp_core.evaluation.suite.Suite.board_cells`; for STS: ``sts_mean_note`` says what
    the STS mean is over when that is less than the paper's 2012-2016, ``over 2012-2014 (2015,
    2016 absent; 2013 without SMT)``)."""
    rows = []
    for lang, result in sorted(results.items()):
        row: dict[str, Any] = {"lang": lang, "dev_sts": result.get("dev_sts")}
        dev = dev_dataset(result.get("dev_sts"))
        for name, each in registered().items():
            row.update(each.board_cells(result.get(name), dev))
        row["missing"] = list(result.get("missing", []))
        rows.append(row)
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
    suites = list(registered().values())
    columns = [column for each in suites for column in each.board_markdown(_empty_row(each))]
    lines = [
        "| lang | " + " | ".join(header for header, _, _ in columns) + " |",
        "|---|" + "|".join(align for _, align, _ in columns) + "|",
    ]
    for row in rows:
        cells = [cell for each in suites for _, _, cell in each.board_markdown(row)]
        lines.append(f"| {row['lang']} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _empty_row(suite) -> dict[str, Any]:
    """A row with nothing evaluated: what a suite's headers are read from."""
    return suite.board_cells(None, None)


def _cell(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}"


def _comparison_sets(row: Mapping[str, Any]) -> list[tuple[str, Any, bool]]:
    """``(label, value of a scoreboard row, higher is better)`` for every set of ``row``: each
    suite's headline figures first (in the registry's order), then the others."""
    sets = [entry for each in registered().values() for entry in each.compared(row)]
    ordered = [s for s in sets if s[3]] + [s for s in sets if not s[3]]
    return [(label, value_of, higher) for label, value_of, higher, _ in ordered]


def _compare(board: list[dict[str, Any]], model: str) -> list[dict[str, Any]]:
    """``model`` (the multilingual model) beside the per-language models, one row per set it
    was evaluated on: ``set``, ``score``, the best per-language model (``best_model``,
    ``best_score``) and ``better_by`` (positive: ``model`` is better; for error rates the sign
    is turned so that positive still means better). Empty when ``model`` has no results."""
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
