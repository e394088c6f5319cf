"""``make run``'s knobs are checked before Dagster starts: each mistake in PARTITION, PROFILE,
CONFIG or REGISTRY is one line naming the knob and what to do, exit 2, no traceback, nothing
created; a right set of knobs passes silently."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from pipelines.preflight import main

ROOT = Path(__file__).resolve().parents[2]
SHARED = "configs/languages-shared-data.toml"
GOOD = {"partition": "de", "profile": "demo", "config": "", "registry": SHARED}


def _argv(knobs: dict[str, str]) -> list[str]:
    return [arg for knob, value in (GOOD | knobs).items() for arg in (f"--{knob}", value)]


@pytest.fixture()
def preflight(capsys, monkeypatch):
    """``python -m pipelines.preflight`` with these knobs, in this process (from the
    repository, as make runs it)."""
    monkeypatch.chdir(ROOT)
    monkeypatch.setenv("PSP_PARANMT_URL", "/nowhere/paranmt.txt")  # (as make sets it)

    def run(tmp_path: Path, **knobs: str) -> subprocess.CompletedProcess:
        code = main(_argv(knobs))
        out, err = capsys.readouterr()
        return subprocess.CompletedProcess([], code, out, err)

    return run


def _file(tmp_path: Path, name: str, text: str) -> str:
    (tmp_path / name).write_text(text, encoding="utf-8")
    return str(tmp_path / name)


CASES = {
    "unknown partition": ({"partition": "xx"}, "PARTITION=xx is not a language", "de, es"),
    "empty partition": ({"partition": ""}, "PARTITION=(empty) is not a language", "multi"),
    "unknown profile": ({"profile": "bogus"}, "PROFILE=bogus is not a profile", "smoke, demo"),
    "empty profile": ({"profile": ""}, "PROFILE is empty", "smoke, demo, paper"),
    "missing registry": ({"registry": "nope.toml"}, "REGISTRY=nope.toml: no such file", "assets"),
    "empty registry": ({"registry": ""}, "REGISTRY is empty", "languages-shared-data"),
    "missing config": ({"config": "nope.yaml"}, "CONFIG=nope.yaml: no such file", "smoke.yaml"),
}
FILES = {
    "malformed registry": ("registry", "r.toml", "[languages.de\n", "not valid TOML"),
    "registry of nothing": ("registry", "r.toml", "[defaults.training]\ndim = 8\n", "no [lang"),
    "malformed config": ("config", "c.yaml", "ops: [\n", "line 2: not valid YAML"),
    "config of a list": ("config", "c.yaml", "- 1\n", "expected a mapping"),
    "unknown config key": (
        "config",
        "c.yaml",
        "ops:\n  psp_model:\n    config:\n      bogus_knob: 1\n",
        "ops:psp_model:config:bogus_knob is not a setting here (accepted: anneal_every,",
    ),
    "config of the wrong type": (
        "config",
        "c.yaml",
        "ops:\n  psp_model:\n    config:\n      epochs: many\n",
        'ops:psp_model:config:epochs. Value "many" is not valid for expected type "Int"',
    ),
}


def _one_line(completed: subprocess.CompletedProcess, *fragments: str) -> None:
    assert completed.returncode == 2, completed.stderr
    assert completed.stdout == "" and "Traceback" not in completed.stderr
    (line,) = completed.stderr.splitlines()
    assert line.startswith("make run: ")
    for fragment in fragments:
        assert fragment in line, line


@pytest.mark.parametrize("case", sorted(CASES))
def test_a_mistaken_knob_is_one_line(preflight, tmp_path: Path, case: str) -> None:
    knobs, *fragments = CASES[case]
    _one_line(preflight(tmp_path, **knobs), *fragments)


@pytest.mark.parametrize("case", sorted(FILES))
def test_a_mistaken_file_is_one_line_naming_where(preflight, tmp_path: Path, case: str) -> None:
    knob, name, text, fragment = FILES[case]
    path = _file(tmp_path, name, text)
    _one_line(preflight(tmp_path, **{knob: path}), f"{knob.upper()}={path}", fragment)


def test_a_broken_language_table_is_named_when_it_is_the_partition(
    preflight, tmp_path: Path
) -> None:
    text = '[languages.de]\nsource = "local"\nlocal_dir = "/d"\n[languages.pt]\nsource = "x"\n'
    registry = _file(tmp_path, "r.toml", text)
    assert preflight(tmp_path, registry=registry).returncode == 0  # de is fine
    _one_line(preflight(tmp_path, registry=registry, partition="pt"), "PARTITION=pt", "source")


@pytest.mark.parametrize("config", ["", "configs/smoke.yaml", "configs/demo.yaml"])
@pytest.mark.parametrize("partition", ["de", "en", "multi"])
def test_the_right_knobs_pass_silently(
    preflight, tmp_path: Path, config: str, partition: str
) -> None:
    completed = preflight(tmp_path, config=config, partition=partition)
    assert (completed.returncode, completed.stdout, completed.stderr) == (0, "", "")


def test_as_a_command_it_prints_one_line_and_exits_2(tmp_path: Path) -> None:
    argv = [sys.executable, "-m", "pipelines.preflight", *_argv({"partition": "xx"})]
    env = os.environ | {"PSP_PARANMT_URL": str(tmp_path / "paranmt.txt")}  # (as make sets it)
    completed = subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    _one_line(completed, "PARTITION=xx is not a language")


@pytest.mark.skipif(
    not (ROOT / ".venv" / ".installed").is_file(), reason="make install has not run here"
)
def test_make_run_checks_before_it_creates_anything(tmp_path: Path) -> None:
    home = tmp_path / "dagster_home"
    completed = subprocess.run(
        ["make", "--no-print-directory", "run", "PROFILE=bogus", f"DAGSTER_HOME={home}",
         f"PSP_STORAGE_ROOT={tmp_path / 'storage'}"],
        cwd=ROOT, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert completed.returncode == 2, completed.stdout + completed.stderr
    ours = [x for x in completed.stderr.splitlines() if not re.match(r"make(\[\d+\])?: \*\*\*", x)]
    assert ours == ["make run: PROFILE=bogus is not a profile: choose one of smoke, demo, paper"]
    assert completed.stdout == "" and not home.exists()
