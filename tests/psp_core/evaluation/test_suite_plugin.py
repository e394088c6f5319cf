"""An evaluation suite defined here, and nowhere else, is a full citizen once registered: it is
downloaded and converted by ``prepare_eval_data``, planned for a language, evaluated by
``evaluate_model`` and ``psp evaluate``, reported in the JSON, the markdown, the Dagster tables
and the model registry's test scores, set beside the other languages on the scoreboard (its
direction respected), and scored by the dev suite, whose gate reads its direction from the
suite, not from the score's name."""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from assets.lifecycle import model_versions
from assets.lifecycle.evaluation_tables import evaluation_tables, scoreboard_tables
from psp_core.cli import main
from psp_core.evaluation import (
    EvalSource,
    Score,
    Suite,
    SuiteRun,
    error_rate,
    evaluate_model,
    plan_for_language,
    prepare_eval_data,
    register,
    registered,
    scoreboard,
    unregister,
)
from psp_core.evaluation.dev_suite import DevSuite
from psp_core.evaluation.gate import decide
from tests.loopback_http import serving_folder


def _first_neighbour_error(model, pairs: list[tuple[str, str]]) -> float:
    """% of first sentences whose nearest second sentence is not their own."""
    first = model.embed([a for a, _ in pairs], normalize=True)
    second = model.embed([b for _, b in pairs], normalize=True)
    return error_rate(np.argmax(first @ second.T, axis=1))


def _read_pairs(path: Path) -> list[tuple[str, str]]:
    return [tuple(line.split("\t")) for line in path.read_text(encoding="utf-8").splitlines()]


class PairRetrieval(Suite):
    """A retrieval error over ``pairs/NAME.tsv`` (lower is better), its dev split gated."""

    name = "pairs"
    title = "Pair retrieval"
    files = ("pairs/*.tsv",)
    higher_is_better = False
    dev_files = {"pairs_dev": "pairs/dev.tsv"}  # (no "_error" in the name: the suite says)

    def __init__(self, url: str = "") -> None:
        self.sources = {"pairs-test.tsv": EvalSource(f"{url}/pairs-test.tsv", "pairs-tsv")}

    def subsets_for(self, lang: str) -> tuple[str, ...] | None:
        return () if lang == "de" else None

    def evaluate(self, model, run: SuiteRun) -> dict[str, float]:
        found = {p.stem: p for p in sorted((run.eval_dir / "pairs").glob("*.tsv"))}
        if "test" not in found:
            run.missing.append("pairs test")
        return {name: _first_neighbour_error(model, _read_pairs(p)) for name, p in found.items()}

    def scores(self, part: Mapping[str, Any] | None, dev) -> list[Score]:
        return [
            Score(
                f"pairs_{name}",
                f"pairs {name} error %",
                round(value, 2),
                False,
                headline=name == "test",
                dev=name == "dev",
            )  # fmt: skip
            for name, value in (part or {}).items()
        ]

    def dev_scorer(self, path: Path):
        pairs = _read_pairs(path)
        return lambda model: _first_neighbour_error(model, pairs)

    def convert(self, downloads: Mapping[str, list[Path]], eval_dir: Path) -> list[str]:
        target = eval_dir / "pairs" / "test.tsv"
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(downloads["pairs-tsv"][0].read_bytes())
        return ["pairs/test"]


@pytest.fixture()
def served(tmp_path, toy) -> Iterator[str]:
    """A loopback server of the suite's file to download."""
    folder = tmp_path / "mirror"
    folder.mkdir()
    lines = "".join(f"{a}\t{b}\n" for a, b in toy.pairs(30, seed=11))
    (folder / "pairs-test.tsv").write_text(lines, encoding="utf-8")
    with serving_folder(folder) as url:
        yield url


@pytest.fixture()
def pair_suite(served) -> Iterator[PairRetrieval]:
    suite = register(PairRetrieval(served))
    try:
        yield suite
    finally:
        unregister("pairs")


def test_a_suite_defined_in_a_test_is_fetched_evaluated_shown_and_gated(
    pair_suite, tmp_path, model, toy, capsys
) -> None:
    assert list(registered())[-1] == "pairs"  # after the built-in suites
    eval_dir = tmp_path / "eval"
    assert prepare_eval_data(eval_dir, formats=["pairs-tsv"], sources=pair_suite.sources) == [
        "pairs/test"
    ]
    (eval_dir / "pairs" / "dev.tsv").write_text(
        "".join(f"{a}\t{b}\n" for a, b in toy.pairs(20, seed=12)), encoding="utf-8"
    )
    # planned for the languages it applies to
    assert "pairs" in plan_for_language("de").suites
    assert "pairs" not in plan_for_language("fr").suites

    # evaluated, in the JSON and the markdown
    results = evaluate_model(model, eval_dir, ["pairs"])
    summary = results.to_dict()
    assert set(summary["pairs"]) == {"dev", "test"} and 0 <= summary["pairs"]["test"] <= 100
    assert results.pairs == summary["pairs"]
    assert "| pairs test error % |" in results.to_markdown()

    # psp evaluate runs it (and lists it among the suites)
    output = tmp_path / "out.json"
    argv = ["evaluate", "--model", str(model.save(tmp_path / "bundle")), "--eval-dir"]
    argv += [str(eval_dir), "--suites", "pairs", "--output-json", str(output)]
    assert main(argv) == 0
    assert json.loads(output.read_text())["pairs"] == pytest.approx(summary["pairs"])
    assert "pairs test error %" in capsys.readouterr().out

    # the Dagster tables and the registry's test scores (the dev split is in none)
    table = evaluation_tables(summary)["pairs"].value
    assert {r.data["set"] for r in table.records} == {
        "pairs test error %",
        "pairs dev error % (dev)",
    }
    assert model_versions.test_scores_of(summary) == {
        "pairs_test": summary["pairs"]["test"].__round__(2)
    }

    # the scoreboard: its column, and the multilingual model compared the right way round
    worse = {**summary, "pairs": {"test": summary["pairs"]["test"] + 10, "dev": 50.0}}
    board = scoreboard({"de": summary, "multi": worse}, "multi")
    assert "| Pair retrieval |" in board.markdown.splitlines()[0]
    (compared,) = [c for c in board.compared if c["set"] == "pairs test error %"]
    assert compared["best_model"] == "de" and compared["better_by"] == pytest.approx(-10, abs=0.01)
    shown = scoreboard_tables(board.rows, board.compared)
    assert "pairs" in {c.name for c in shown["scoreboard"].value.schema.columns}

    # the dev suite scores it, and the gate reads lower as better from the suite
    dev = DevSuite(eval_dir).scores(model)
    assert set(dev) == {"pairs_dev"}
    assert not decide({"pairs_dev": dev["pairs_dev"] + 5}, dev, 1.0).promote
    assert decide({"pairs_dev": max(dev["pairs_dev"] - 5, 0.0)}, dev, 1.0).promote


def test_a_suite_missing_what_it_needs_is_refused_when_registered() -> None:
    class NoEvaluate(Suite):
        name, title = "broken", "Broken"

    with pytest.raises(TypeError, match="evaluate"):
        register(NoEvaluate)

    class DevWithoutScorer(Suite):
        name, title = "broken", "Broken"
        dev_files = {"broken_dev": "broken/dev.tsv"}

        def evaluate(self, model, run):
            return {}

    with pytest.raises(TypeError, match="dev_files but no dev_scorer"):
        register(DevWithoutScorer)
    assert "broken" not in registered()
