"""benchmarks/RESULTS.md stays one page, keeps a section for every benchmark script, and every
link into it (from code, docs or configuration) lands on a section that exists.

A script's section is marked by an explicit anchor line, ``<a id="NAME"></a>``, where NAME is the
script's file name without ``.py`` and with ``_`` written ``-``: code comments and docs link to
these names, so renaming a section's title never breaks a link, and removing a section does."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
BENCHMARKS = ROOT / "benchmarks"
RESULTS = BENCHMARKS / "RESULTS.md"
MAX_LINES = 400

ANCHOR_LINE = re.compile(r'^<a id="([^"]+)"></a>$', re.MULTILINE)
# a link into the page: the file name, "#", then the anchor
LINK_INTO_RESULTS = re.compile(r"RESULTS\.md#([A-Za-z0-9_-]+)")
LINK_WITHIN_PAGE = re.compile(r"\]\(#([A-Za-z0-9_-]+)\)")


def anchors() -> set[str]:
    return set(ANCHOR_LINE.findall(RESULTS.read_text(encoding="utf-8")))


def script_anchor(script: Path) -> str:
    return script.stem.replace("_", "-")


def benchmark_scripts() -> list[Path]:
    return sorted(path for path in BENCHMARKS.glob("*.py") if path.name != "_common.py")


def tracked_files() -> list[Path]:
    """Every tracked ``*.py``, ``*.md``, ``*.toml`` and ``Makefile`` of the repository."""
    try:
        listing = subprocess.run(
            ["git", "-C", str(ROOT), "ls-files", "-z", "--", "*.py", "*.md", "*.toml", "*Makefile"],
            check=True,
            capture_output=True,
            text=True,
        ).stdout
    except (OSError, subprocess.CalledProcessError) as error:
        pytest.skip(f"not a git checkout: {error}")
    paths = [ROOT / name for name in listing.split("\0") if name]
    return [
        path
        for path in paths
        if path.is_file() and (path.suffix in {".py", ".md", ".toml"} or path.name == "Makefile")
    ]


def test_the_page_has_at_most_400_lines() -> None:
    lines = len(RESULTS.read_text(encoding="utf-8").splitlines())
    assert lines <= MAX_LINES, (
        f"{RESULTS.relative_to(ROOT)} has {lines} lines (at most {MAX_LINES})"
    )


def test_every_benchmark_script_has_its_section() -> None:
    scripts = benchmark_scripts()
    assert scripts, "no benchmark scripts found"
    missing = [
        f'{script.name}: <a id="{script_anchor(script)}"></a>'
        for script in scripts
        if script_anchor(script) not in anchors()
    ]
    assert missing == []


def test_anchors_are_unique() -> None:
    found = ANCHOR_LINE.findall(RESULTS.read_text(encoding="utf-8"))
    assert sorted({name for name in found if found.count(name) > 1}) == []


def test_every_link_into_the_page_has_its_anchor() -> None:
    known = anchors()
    broken = []
    for path in tracked_files():
        text = path.read_text(encoding="utf-8", errors="replace")
        for line_number, line in enumerate(text.splitlines(), start=1):
            for anchor in LINK_INTO_RESULTS.findall(line):
                if anchor not in known:
                    broken.append(f"{path.relative_to(ROOT)}:{line_number}: #{anchor}")
    assert broken == [], "links to sections RESULTS.md does not have"


def test_links_within_the_page_resolve() -> None:
    links = LINK_WITHIN_PAGE.findall(RESULTS.read_text(encoding="utf-8"))
    assert sorted(set(links) - anchors()) == []
