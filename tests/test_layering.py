"""The dependency direction of DESIGN.md: pipelines -> assets -> ops / psp_core, and psp_core (the
library users install) imports nothing of the pipeline. Checked on the import statements of
every module, so a new arrow the wrong way fails here rather than in a circular import later."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
#: package -> the project packages it must not import
FORBIDDEN = {
    "psp_core": {"ops", "assets", "pipelines"},
    "ops": {"assets", "pipelines"},
    "assets": {"pipelines"},
}


def imported_packages(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module.split(".")[0])
    return names


@pytest.mark.parametrize("package", sorted(FORBIDDEN))
def test_no_import_goes_against_the_layers(package: str) -> None:
    modules = sorted((ROOT / package).rglob("*.py"))
    assert modules, f"no modules found under {package}/"
    wrong = {
        str(path.relative_to(ROOT)): sorted(imported_packages(path) & FORBIDDEN[package])
        for path in modules
    }
    assert {path: found for path, found in wrong.items() if found} == {}
