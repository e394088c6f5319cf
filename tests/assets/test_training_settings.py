"""One merge of a training's settings, with where each value came from: the code's defaults, a
registry's [defaults] (inherited from another registry, key by key), the language's table, the
profile, the run config, the compute resource and the incremental retrain's scale; and a
registry that inherits another's [defaults] instead of copying them."""

from __future__ import annotations

from pathlib import Path

import pytest

from assets.settings.languages import RegistryError, load_registry, parse_registry
from assets.settings.training_settings import CODE_DEFAULT, merge_training_settings

ROOT = Path(__file__).resolve().parents[2]
LANGUAGE = '[languages.pt]\nsource = "local"\nlocal_dir = "/data/en-pt"\n'


def _registry(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def test_each_layer_overrides_the_one_before_and_says_so(tmp_path: Path) -> None:
    base = _registry(
        tmp_path, "base.toml", "[defaults.training]\nlr = 0.002\nepochs = 9\n" + LANGUAGE
    )
    own = _registry(
        tmp_path,
        "own.toml",
        'inherit_defaults = "base.toml"\n[defaults.training]\nepochs = 7\n'
        + LANGUAGE
        + "[languages.pt.training]\ndim = 64\n",
    )
    spec = parse_registry(own.read_text(), own)["pt"]
    merged = merge_training_settings(
        spec.training,
        spec.training_origins,
        ("demo", {"batch_size": 32, "epochs": 5}),
        {"batch_size": 16},
        {"device": "cpu", "num_threads": 2},
    )
    shown = merged.shown()
    assert shown["lr"] == {"value": 0.002, "from": f"{base} [defaults.training]"}
    assert shown["epochs"] == {"value": 5, "from": "profile demo"}
    assert shown["dim"] == {"value": 64, "from": f"{own} [languages.pt.training]"}
    assert shown["batch_size"] == {"value": 16, "from": "run config"}
    assert shown["device"] == {"value": "cpu", "from": "compute resource"}
    assert shown["margin"]["from"] == CODE_DEFAULT
    assert merged.config.dim == 64 and merged.config.lr == 0.002


@pytest.mark.parametrize(
    ("profile", "run_config", "lr", "origin"),
    [
        # the scale applies to the rate the layers below the run config chose: the profile's
        ({"lr": 0.01}, {}, 0.01 * 0.3, "profile paper, x 0.3 ([retrain] lr_scale"),
        ({}, {}, 0.001 * 0.3, "[defaults.training], x 0.3 ([retrain] lr_scale"),
        # a rate the run sets is taken as it is
        ({"lr": 0.01}, {"lr": 0.05}, 0.05, "run config"),
    ],
)
def test_the_retrain_scale_applies_unless_the_run_sets_the_rate(
    profile, run_config, lr, origin
) -> None:
    spec = load_registry(ROOT / "assets" / "languages.toml")["de"]
    merged = merge_training_settings(
        spec.training, spec.training_origins, ("paper", profile), run_config, {}, 0.3
    )
    assert merged.config.lr == pytest.approx(lr)
    assert origin in merged.origins["lr"]


def test_the_shared_data_registry_has_the_shipped_defaults() -> None:
    """The offline registry repeats the shipped [defaults] (the benchmarks and tests that copy
    it rewrite them); they must not drift apart."""
    shipped = load_registry(ROOT / "assets" / "languages.toml")
    shared = load_registry(ROOT / "configs" / "languages-shared-data.toml")
    for code in ("de", "en", "zh"):
        assert shared[code].training == shipped[code].training
        assert shared[code].filters == shipped[code].filters
        assert shared[code].sentencepiece == shipped[code].sentencepiece
        assert shared[code].promotion == shipped[code].promotion
        assert shared[code].retrain == shipped[code].retrain


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('inherit_defaults = "missing.toml"\n', "missing.toml does not exist"),
        ('inherit_defaults = "self.toml"\n', "inherits from itself"),
        ("inherit_defaults = 3\n", "must be a registry file's path"),
        ('inherit_defaults = "broken.toml"\n', "broken.toml (inherited by"),
        ('inherit_defaults = "typo.toml"\n', "unknown keys ['lrr']"),
    ],
)
def test_a_bad_inheritance_is_a_clear_error(tmp_path: Path, text: str, message: str) -> None:
    _registry(tmp_path, "broken.toml", "[defaults.training\n")
    _registry(tmp_path, "typo.toml", "[defaults.training]\nlrr = 1\n")
    path = _registry(tmp_path, "self.toml", text + LANGUAGE)
    with pytest.raises(RegistryError) as error:
        parse_registry(path.read_text(), path)
    assert message in str(error.value)
