"""The house rules of the layout, checked on every module's import statements:

* the dependency direction pipelines -> assets -> ops / psp_core, psp_core (the library users
  install) importing nothing of the pipeline;
* no import cycle inside a package, nor between its sub-packages, and psp_core grouped by concept: a handful of modules at its
  top level, the rest in packages named after what they hold;
* no function longer than LONGEST_FUNCTION lines in the product packages;
* Dagster's private modules reached from one module only (``pipelines/dagster_internals.py``),
  so that the install can accept any patch release of a Dagster series.

A new arrow the wrong way fails here rather than in a circular import later."""

from __future__ import annotations

import ast
import re
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


#: the most modules psp_core may keep at its top level (the rest live in concept packages)
PSP_CORE_TOP_LEVEL_MODULES = 8
#: modules allowed to import Dagster's private modules
DAGSTER_INTERNALS = {"pipelines/dagster_internals.py"}


def module_name(path: Path, root: Path) -> str:
    parts = path.relative_to(root).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imported_modules(path: Path, known: set[str]) -> set[str]:
    """The project modules ``path`` imports (``from a.b import c`` counts a.b and a.b.c)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), filename=str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.add(node.module)
            found.update(f"{node.module}.{alias.name}" for alias in node.names)
    return found & known


def reachable(graph: dict[str, set[str]], start: str) -> set[str]:
    reach, frontier = set(), [start]
    while frontier:
        for nxt in graph[frontier.pop()] - reach:
            reach.add(nxt)
            frontier.append(nxt)
    return reach


def cycles_of(graph: dict[str, set[str]]) -> list[list[str]]:
    """The groups of nodes of ``graph`` that reach each other (each sorted), in node order."""
    cycles, seen = [], set()
    for start in sorted(graph):
        if start not in seen and start in reachable(graph, start):
            cycle = sorted(m for m in reachable(graph, start) if start in reachable(graph, m))
            seen.update(cycle)
            cycles.append(cycle)
    return cycles


def import_cycles(package: str, root: Path = ROOT) -> list[list[str]]:
    """Groups of modules of ``package`` that import each other, directly or through others.
    An import of a parent package (its ``__init__``) does not count."""
    paths = {module_name(p, root): p for p in sorted((root / package).rglob("*.py"))}
    graph = {
        name: {m for m in imported_modules(path, set(paths)) if not name.startswith(m + ".")}
        - {name}
        for name, path in paths.items()
    }
    return cycles_of(graph)


def part_of(module: str, package: str) -> str:
    """The part of ``package`` that ``module`` belongs to: its sub-package or top-level module
    (``psp_core.files.download`` -> ``psp_core.files``); the package's own ``__init__`` is
    itself."""
    return ".".join(module.split(".")[:2]) if module != package else package


def part_cycles(package: str, root: Path = ROOT) -> list[list[str]]:
    """Groups of ``package``'s parts (its sub-packages and top-level modules) that import each
    other, directly or through others: a cycle between modules of two packages that no module
    cycle shows. Its own ``__init__`` (the public names, imported lazily) is left out."""
    paths = {module_name(p, root): p for p in sorted((root / package).rglob("*.py"))}
    graph: dict[str, set[str]] = {}
    for name, path in paths.items():
        if name == package:
            continue
        part = part_of(name, package)
        imported = {part_of(m, package) for m in imported_modules(path, set(paths))}
        graph.setdefault(part, set()).update(imported - {part, package})
    return cycles_of(graph)


@pytest.mark.parametrize("package", ["psp_core", "ops", "assets", "pipelines"])
def test_no_package_has_an_import_cycle(package: str) -> None:
    assert import_cycles(package) == []


@pytest.mark.parametrize("package", ["psp_core", "ops", "assets", "pipelines"])
def test_no_two_parts_of_a_package_import_each_other(package: str) -> None:
    assert part_cycles(package) == []


def test_a_cycle_between_parts_is_found_when_no_module_cycle_shows_it(tmp_path: Path) -> None:
    """``loop.one.a`` imports ``loop.two.b``, and ``loop.two.c`` imports ``loop.one.d``: no
    module imports one that imports it back, but the packages one and two do."""
    for name, text in {
        "__init__.py": "",
        "one/__init__.py": "",
        "one/a.py": "from loop.two.b import x\n",
        "one/d.py": "y = 1\n",
        "two/__init__.py": "",
        "two/b.py": "x = 1\n",
        "two/c.py": "from loop.one.d import y\n",
        "top.py": "import loop.one.a\n",
    }.items():
        path = tmp_path / "loop" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    assert import_cycles("loop", root=tmp_path) == []
    assert part_cycles("loop", root=tmp_path) == [["loop.one", "loop.two"]]


def test_a_cycle_is_found_when_there_is_one(tmp_path: Path) -> None:
    """The cycle finder itself: two modules importing each other are reported."""
    package = tmp_path / "loop"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "a.py").write_text("from loop.b import x\n")
    (package / "b.py").write_text("import loop.a\nx = 1\n")
    (package / "c.py").write_text("from loop import a\n")
    assert import_cycles("loop", root=tmp_path) == [["loop.a", "loop.b"]]


#: the most modules ops and assets may keep at their top level (their concepts are packages)
PIPELINE_TOP_LEVEL_MODULES = 10


@pytest.mark.parametrize(
    "package, most",
    [
        ("psp_core", PSP_CORE_TOP_LEVEL_MODULES),
        ("ops", PIPELINE_TOP_LEVEL_MODULES),
        ("assets", PIPELINE_TOP_LEVEL_MODULES),
    ],
)
def test_a_package_keeps_few_modules_at_its_top_level(package: str, most: int) -> None:
    top = sorted(p.name for p in (ROOT / package).glob("*.py"))
    assert len(top) <= most, top


def test_dagster_private_modules_are_imported_from_one_place() -> None:
    private = re.compile(
        r"^\s*(from\s+dagster\._|import\s+dagster\._|from\s+dagster\s+import\s+_)", re.M
    )
    users = {
        str(path.relative_to(ROOT))
        for package in ("psp_core", "ops", "assets", "pipelines", "scripts")
        for path in (ROOT / package).rglob("*.py")
        if private.search(path.read_text(encoding="utf-8"))
    }
    assert users <= DAGSTER_INTERNALS, users - DAGSTER_INTERNALS


#: the longest a function of the product packages may be, in lines
LONGEST_FUNCTION = 120


def test_no_function_of_the_product_is_too_long_to_read() -> None:
    long = []
    for package in ("psp_core", "ops", "assets", "pipelines"):
        for path in sorted((ROOT / package).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                    lines = node.end_lineno - node.lineno + 1
                    if lines > LONGEST_FUNCTION:
                        long.append(f"{path.relative_to(ROOT)}:{node.lineno} {node.name} {lines}")
    assert long == []
