"""docs/development.md's how-to lists name real files and real hooks: every path in an "Adding
..." section exists, every suite hook the suite list names is one ``Suite`` has, and every
built-in suite module is imported where the list says the order of the tables is decided."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from psp_core.evaluation import Suite, registered

ROOT = Path(__file__).resolve().parents[1]
GUIDE = (ROOT / "docs" / "development.md").read_text(encoding="utf-8")


def how_to_sections() -> dict[str, str]:
    """``{title: text}`` of every ``## Adding ...`` section."""
    parts = re.split(r"^## ", GUIDE, flags=re.MULTILINE)
    return {p.splitlines()[0]: p for p in parts if p.startswith("Adding ")}


def test_the_guide_has_the_how_to_lists() -> None:
    assert set(how_to_sections()) == {
        "Adding a stage",
        "Adding a language",
        "Adding a setting",
        "Adding an evaluation suite",
    }


def test_the_stage_list_names_the_factorys_parameters() -> None:
    from inspect import signature

    from assets.framework.stage_asset import stage_asset

    text = how_to_sections()["Adding a stage"]
    for parameter in ("inputs", "also_reads", "plan", "report"):
        assert f"`{parameter}" in text and parameter in signature(stage_asset).parameters
    from pipelines.definitions import ASSET_MODULES

    assert "ASSET_MODULES" in text and ASSET_MODULES


@pytest.mark.parametrize("title", sorted(how_to_sections()))
def test_every_path_a_how_to_names_exists(title: str) -> None:
    paths = re.findall(
        r"`((?:psp_core|ops|assets|pipelines|tests|configs)/[^`<>\s]+)`", how_to_sections()[title]
    )
    assert paths, f"{title} names no file"
    missing = [p for p in paths if not (ROOT / p.rstrip("/")).exists()]
    assert missing == []


def test_every_suite_hook_the_guide_names_is_one_of_suite() -> None:
    text = how_to_sections()["Adding an evaluation suite"]
    named = set(re.findall(r"`([a-z_]+)(?:\([^`]*\))?`", text)) - {"register"}
    named = {n for n in named if not n.startswith(("psp_", "test_")) and "/" not in n}
    hooks = {n.replace("*", "") for n in named}
    assert {"evaluate", "scores", "subsets_for", "dev_scorer"} <= hooks
    known = set(dir(Suite)) | set(Suite.__annotations__)
    assert [h for h in sorted(hooks) if h not in known and h != "board_"] == []


def test_the_built_in_suites_are_imported_in_the_order_of_the_tables() -> None:
    init = (ROOT / "psp_core" / "evaluation" / "suites" / "__init__.py").read_text()
    imported = re.findall(r"^from psp_core\.evaluation\.suites import (\w+)", init, re.MULTILINE)
    modules = sorted(
        p.stem
        for p in (ROOT / "psp_core/evaluation/suites").glob("*.py")
        if not p.stem.startswith("_")
    )
    assert sorted(imported) == modules
    owners = [type(s).__module__.rsplit(".", 1)[-1] for s in registered().values()]
    assert owners[: len(imported)] == imported
