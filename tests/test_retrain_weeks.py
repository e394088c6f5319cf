"""benchmarks/retrain_weeks.py's own logic: its variants and their usage errors, the weeks' slices
of the pairs, the registry each chain runs with, the summary the goals are judged on, and (on
the shared data) a rerun that keeps the finished weeks and adds only the missing ones."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from argparse import Namespace
from pathlib import Path

import pytest

from assets.settings.languages import load_registry

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "benchmarks" / "retrain_weeks.py"
SHARED = ROOT.parent / "shared" / "data"


def load_script():
    """The script as a module (its directory on ``sys.path`` while it imports ``_common``, as
    when it is run)."""
    spec = importlib.util.spec_from_file_location("retrain_weeks", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # (dataclasses look their module up)
    sys.path.insert(0, str(SCRIPT.parent))
    try:
        spec.loader.exec_module(module)
    finally:
        sys.path.remove(str(SCRIPT.parent))
    return module


weeks = load_script()


def run_script(*arguments: str) -> subprocess.CompletedProcess:
    from tests.test_benchmarks import quick_environment

    command = [sys.executable, str(SCRIPT), *arguments]
    return subprocess.run(
        command, cwd=ROOT, env=quick_environment(), capture_output=True, text=True, timeout=300
    )


def test_a_variant_sets_the_replay_share_lr_and_epochs():
    variant = weeks.parse_variant("replay=0.25:lr=0.025:epochs=2")
    assert (variant.replay, variant.lr, variant.epochs) == (0.25, 0.025, 2)
    assert variant.model_config() == {"lr": 0.025, "epochs": 2}
    assert weeks.parse_variant("default").model_config() == {}
    assert weeks.parse_variant("replay=0.5").slug != weeks.parse_variant("replay=0.25").slug


@pytest.mark.parametrize(
    ("arguments", "said"),
    [
        (["--variants", "replay=0.5:seed=3"], "'seed=3' is not one of"),
        (["--variants", "lr=fast"], "lr must be a number"),
        (["--variants", "replay=1.0"], "replay must be in [0, 1)"),
        (["--variants", "replay=0.5,replay=0.5"], "the same variant twice"),
        (["--weeks", "9"], "more than all the pairs"),
    ],
)
def test_bad_settings_are_usage_errors(arguments: list[str], said: str, tmp_path: Path):
    completed = run_script(*arguments, "--results-dir", str(tmp_path))
    assert completed.returncode == 2, completed.stderr
    assert said in completed.stderr.splitlines()[-1]
    assert not any(tmp_path.iterdir())  # nothing started


def test_the_weeks_take_the_pairs_in_turn_and_end_with_all_of_them():
    slices = weeks.week_slices(95_379, 0.6, 0.05, 8)
    assert slices[0] == (0, 57_227) and slices[-1][1] == 95_379
    assert all(a[1] == b[0] for a, b in zip(slices, slices[1:], strict=False))
    assert all(end - begin in (4_769, 4_770) for begin, end in slices[1:])


def test_a_chain_registry_seeds_the_training_and_sets_the_replay_share(tmp_path: Path):
    args = Namespace(data_dir=tmp_path / "data")
    bitext = tmp_path / "bitext"
    path = weeks.registry_file(tmp_path / "inc" / "languages.toml", bitext, args, 7, 0.25)
    spec = load_registry(path).languages["de"]
    assert spec.retrain.replay_share == 0.25 and spec.training["seed"] == 7
    assert spec.retrain.init_from == "multi"  # (de's own [retrain] table kept)
    assert Path(spec.local_dir) == bitext
    full = load_registry(weeks.registry_file(tmp_path / "full.toml", bitext, args, 3, None))
    assert full.languages["de"].training["seed"] == 3
    assert full.languages["de"].retrain.replay_share == 0.5  # the registry's default


def row(mode: str, seconds: float, dev_mean: float, promoted: bool = True, drop=None) -> dict:
    gate = {"promoted": promoted, "reason": "why"}
    if drop is not None:
        gate |= {"dev_mean_vs_replaced": drop, "worst_score_vs_replaced": 2 * drop}
    return {
        "mode": mode,
        "retrain_reason": f"{mode} because",
        "training_seconds": seconds,
        "steps": int(seconds),
        "dev_mean": dev_mean,
        "dev_scores": {"stsb_dev": dev_mean},
        "gate": gate,
    }


def test_the_summary_compares_the_chains_over_the_later_weeks():
    week0 = row("full", 100.0, 80.0)
    chains = {
        1: {
            "incremental": {
                0: week0,
                1: row("incremental", 10.0, 80.5, drop=0.5),
                2: row("incremental", 20.0, 79.0, promoted=False, drop=-1.5)
                | {"auto_would": {"mode": "full", "rule": "refused", "reason": "..."}},
            },
            "full": {0: week0, 1: row("full", 100.0, 80.0), 2: row("full", 100.0, 80.0)},
        },
        2: {
            "incremental": {0: week0, 1: row("full", 50.0, 81.0), 2: row("incremental", 5, 81.0)},
            "full": {0: week0, 1: row("full", 100.0, 80.0), 2: row("full", 50.0, 80.0)},
        },
    }
    summary = weeks.variant_summary(chains, 2, 1.0)
    assert summary["training_share_overall"]["per_seed"] == {"1": 0.15, "2": 0.3667}
    assert summary["steps_share_overall"]["mean"] == pytest.approx((0.15 + 0.3667) / 2, abs=1e-3)
    assert summary["last_week_dev_mean_gap"]["per_seed"]["1"] == {"week": 2, "gap": -1.0}
    assert summary["last_week_dev_mean_gap"]["mean"] == 0.0
    assert summary["largest_dev_mean_drop_below_replaced"] == {"value": -1.5, "seed": 1, "week": 2}
    assert summary["largest_single_score_drop_below_replaced"]["value"] == -3.0
    assert summary["refused"] == [{"seed": 1, "week": 2, "reason": "why"}]
    assert summary["incremental_chain_weeks_trained_full"] == [
        {"seed": 2, "week": 1, "reason": "full because"}
    ]
    assert summary["auto_would_have_trained_full"] == [{"seed": 1, "week": 2, "rule": "refused"}]
    table = weeks.variant_table(chains, 2)
    assert [w["week"] for w in table] == [0, 1, 2]
    assert table[2]["training_share"] == pytest.approx((0.2 + 0.1) / 2)
    assert table[2]["steps_share"] == pytest.approx((0.2 + 0.1) / 2)
    assert table[2]["incremental"]["promoted"] == "1 of 2"
    assert table[2]["incremental"]["auto_would"] == ["full (refused)"]


@pytest.mark.slow
@pytest.mark.real_data
def test_a_rerun_keeps_the_finished_weeks_and_adds_the_missing_ones(tmp_path: Path):
    if not (SHARED / "bitext" / "en-de").is_dir():
        pytest.skip(f"the shared data is not at {SHARED}")
    results = ["--quick", "--results-dir", str(tmp_path)]
    first = run_script(*results, "--weeks", "1")
    assert first.returncode == 0, first.stderr[-3000:]
    [one] = json.loads(first.stdout)["variants"].values()
    assert [w["week"] for w in one["weeks"]] == [0, 1]

    second = run_script(*results)
    assert second.returncode == 0, second.stderr[-3000:]
    [two] = json.loads(second.stdout)["variants"].values()
    assert [w["week"] for w in two["weeks"]] == [0, 1, 2]
    assert two["weeks"][1]["per_seed"] == one["weeks"][1]["per_seed"]  # not trained again
    assert "full week 1:" not in second.stderr and "full week 2:" in second.stderr
    # week 0 trained once and shared: every chain starts from its version
    per_seed = two["weeks"][0]["per_seed"]["1"]
    assert per_seed["incremental"]["version"] == per_seed["full"]["version"]
    assert two["weeks"][1]["per_seed"]["1"]["incremental"]["parent"] == per_seed["full"]["version"]
    storage = tmp_path / "quick-retrain-weeks" / "seed-1" / "full" / "storage"
    assert len(list((storage / "de" / "psp_model" / "versions").iterdir())) == 3

    other = run_script(*results, "--start-share", "0.5")
    assert other.returncode == 1
    assert "holds weeks made with other settings" in other.stderr.splitlines()[-1]
