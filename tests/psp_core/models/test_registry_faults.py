"""The registry under faults: two promotions of one version at the same instant (one promotes,
the other says nothing changed, one history line); a promotion on a full disk (one line naming
the history file, the link unmoved, the history whole); a history whose last line an older
writer cut short (dropped with a warning, never appended to)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from psp_core.files.output_files import OutputError
from psp_core.models.registry import HISTORY, ModelRegistry
from tests.psp_core.filesystems import fill_up, tiny_tmpfs

PSP = Path(sys.executable).with_name("psp")


def _registry_with_two(root: Path, model) -> tuple[ModelRegistry, str, str]:
    registry = ModelRegistry(root / "de" / "psp_model")
    first = registry.add_version("a" * 24, lambda path: model.save(path) and {})
    second = registry.add_version("b" * 24, lambda path: model.save(path) and {})
    registry.promote(first.id, reason="first")
    return registry, first.id, second.id


def test_two_promotions_at_the_same_instant_promote_once(tmp_path, model) -> None:
    registry, _, second = _registry_with_two(tmp_path, model)
    argv = [str(PSP), "models", "promote", "de", second, "--storage-root", str(tmp_path)]
    runs = [subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            for _ in range(4)]  # fmt: skip
    outputs = [run.communicate(timeout=120) for run in runs]
    assert [run.returncode for run in runs] == [0] * 4, outputs
    said = sorted(out.split(":")[0].split(" ")[0] for out, _ in outputs)
    assert said.count("promoted") == 1 and said.count(second) == 3, outputs
    promotions = [e for e in registry.history() if e["version"] == second]
    assert len(promotions) == 1 and registry.promoted().id == second


def test_a_promotion_on_a_full_disk_changes_nothing_and_names_the_file(tmp_path, model) -> None:
    with tiny_tmpfs(tmp_path / "disk", size_kib=2048) as disk:
        registry, first, second = _registry_with_two(disk, model)
        history = (registry.root / HISTORY).read_bytes()
        filler = fill_up(disk)
        with pytest.raises(OutputError, match=HISTORY) as error:
            registry.promote(second, reason="on a full disk", scores={"x": "y" * 10_000})
        assert "space" in str(error.value).lower()
        assert registry.promoted().id == first  # the link did not move
        assert (registry.root / HISTORY).read_bytes() == history  # no half line
        filler.unlink()
        registry.promote(second, reason="with room again")
        assert registry.promoted().id == second
        assert [e["version"] for e in registry.history()] == [first, second]


def test_a_cut_last_line_is_dropped_with_a_warning_never_appended_to(
    tmp_path, model, caplog
) -> None:
    registry, first, second = _registry_with_two(tmp_path, model)
    path = registry.root / HISTORY
    with open(path, "ab") as handle:
        handle.write(b'{"action": "promote", "version": "half')  # an older writer, killed
    registry.promote(second, reason="after the crash")
    assert "cut short" in caplog.text and str(path) in caplog.text
    lines = path.read_text().splitlines()
    assert [json.loads(line)["version"] for line in lines] == [first, second]
    assert path.read_bytes().endswith(b"\n")
