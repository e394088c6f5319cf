"""The language registry: the shipped file is the paper's setup; bad entries are clear errors."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
from dagster import materialize

from assets.settings.languages import RegistryError, load_registry, parse_registry
from ops.language_id.langid import LanguageRule
from ops.pairs.pair_files import iter_pairs, pair_file_info
from ops.sources.opus import paper_corpora
from pipelines.definitions import defs
from psp_core.training import TrainConfig
from tests.ops.opus_server import OpusServer, build_moses_zip
from tests.pipelines.conftest import loopback_resources
from tests.pipelines.corpora import english_german
from tests.pipelines.isolated import materialize_raw_pairs_isolated

PAPER_LANGUAGES = ["en", "ar", "de", "es", "fr", "ru", "tr", "zh"]


def test_shipped_registry_has_the_papers_languages_sources_and_defaults() -> None:
    registry = load_registry()
    assert registry.codes == PAPER_LANGUAGES
    assert registry["en"].source == "paranmt" and registry["en"].kind == "paraphrase"
    for code in PAPER_LANGUAGES[1:]:
        spec = registry[code]
        assert spec.kind == "bitext"
        expected = [(c.name, c.version, c.cap) for c in paper_corpora(code)]
        assert [(c.name, c.version, c.cap) for c in spec.corpora] == expected
        assert [c.opus_code(code) for c in spec.corpora] == [
            c.opus_code(code) for c in paper_corpora(code)
        ]
    assert (
        registry["zh"].pretokenizer == "none"
    )  # raw text: benchmarks/RESULTS.md#segmenter-compare
    assert registry["de"].pretokenizer == "none"
    assert registry["de"].train_config() == TrainConfig()  # the paper's hyperparameters
    assert registry["de"].train_config(dim=32).dim == 32
    assert registry["de"].sentencepiece.vocab_size == 50_000
    assert registry["en"].filters.filter_config().max_trigram_overlap == 0.7


def test_a_new_language_is_only_a_config_entry(tmp_path: Path, monkeypatch) -> None:
    path = tmp_path / "languages.toml"
    path.write_text(
        """
[defaults.training]
dim = 300
[languages.pt]
source = "opus"
corpora = [{ name = "Tanzil", version = "v1", cap = 1000 }]
[languages.pt.training]
epochs = 3
[languages.pt.filters]
bitext_max_tokens = 50
[languages.is]
source = "local"
local_dir = "/data/en-is"
"""
    )
    monkeypatch.setenv("PSP_LANGUAGES", str(path))
    registry = load_registry()
    assert registry.codes == ["pt", "is"]
    pt = registry["pt"]
    assert (pt.train_config().dim, pt.train_config().epochs) == (300, 3)
    assert pt.filters.bitext_max_tokens == 50 and pt.filters.bitext_min_tokens == 3
    assert pt.corpora[0].cap == 1000
    assert registry["is"].local_dir == "/data/en-is"


def test_language_id_rules_are_registry_settings() -> None:
    shipped = load_registry()
    assert shipped["de"].filters.langid_rule("bitext") == LanguageRule("other_language")
    assert shipped["en"].filters.langid_rule(shipped["en"].kind) == LanguageRule("top_label")
    registry = parse_registry(
        """
[defaults.filters]
langid_other_p = 0.5
[languages.de]
source = "local"
local_dir = "/data/en-de"
[languages.de.filters]
bitext_langid_rule = "threshold"
langid_threshold = 0.7
[languages.fr]
source = "local"
local_dir = "/data/en-fr"
""",
        Path("languages.toml"),
    )
    de, fr = registry["de"].filters, registry["fr"].filters
    assert de.langid_rule("bitext") == LanguageRule("threshold", other_p=0.5, threshold=0.7)
    assert fr.langid_rule("bitext") == LanguageRule("other_language", other_p=0.5)
    assert fr.langid_rule("paraphrase") == LanguageRule("top_label", other_p=0.5)


#: Real short en-de lines: two correct ones only the other_language rule keeps, a clear one,
#: and a French line
SHORT_EN_DE = [
    ("Lucrative business", "Lukratives Geschäft"),  # lid: en 0.34, de 0.32
    ("Better than expected", "Besser als erwartet"),  # lid: nl 0.63, de 0.37
    ("I don't know.", "Ich weiß es nicht."),
    ("Good idea.", "Bonne idée."),
]


@pytest.mark.parametrize(
    ("filters", "kept", "rule"),
    [
        ("", [0, 1, 2], {"name": "other_language", "other_p": 0.35, "own_p": 0.1}),
        ("langid_own_p = 0.4\n", [0, 2], {"name": "other_language", "own_p": 0.4}),
        ('bitext_langid_rule = "threshold"\n', [2], {"name": "threshold", "threshold": 0.5}),
    ],
)
def test_the_registrys_rule_reaches_the_language_id_stage(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, filters: str, kept: list[int], rule: dict
) -> None:
    bitext = tmp_path / "bitext"
    bitext.mkdir()
    (bitext / "news.en").write_text("".join(en + "\n" for en, _ in SHORT_EN_DE))
    (bitext / "news.de").write_text("".join(de + "\n" for _, de in SHORT_EN_DE))
    registry = tmp_path / "languages.toml"
    registry.write_text(
        f'[languages.de]\nsource = "local"\nlocal_dir = "{bitext}"\n'
        f"[languages.de.filters]\n{filters}"
    )
    monkeypatch.setenv("PSP_LANGUAGES", str(registry))
    resources = loopback_resources(OpusServer(), tmp_path / "storage", tmp_path / "eval")
    stages = [defs.get_assets_def(name) for name in ("raw_pairs", "langid_filtered_pairs")]
    result = materialize(stages, partition_key="de", resources=resources)
    assert result.success
    (event,) = result.asset_materializations_for_node("langid_filtered_pairs")
    metadata = {key: value.value for key, value in event.metadata.items()}
    assert metadata["pairs_out"] == len(kept)
    settings = {r.data["name"]: r.data["value"] for r in metadata["rule_settings"].records}
    assert {k: str(v) for k, v in rule.items()}.items() <= settings.items()
    assert metadata["rule"].startswith(rule["name"])
    output = tmp_path / "storage" / "de" / "langid_filtered_pairs" / "pairs.parquet"
    assert list(iter_pairs(output)) == [SHORT_EN_DE[i] for i in kept]


#: A usable language beside each broken table below.
VALID_PT = '[languages.pt]\nsource = "local"\nlocal_dir = "/data/en-pt"\n'


@pytest.mark.parametrize(
    ("code", "table", "message"),
    [
        ("de", 'source = "opus"\n', "[languages.de]: source 'opus' needs a non-empty corpora"),
        ("de", 'source = "ftp"\n', "[languages.de]: source must be one of"),
        ("de", 'source = "local"\n', "[languages.de]: local_dir is required"),
        ("en", 'source = "local"\nlocal_dir = "x"\n', "[languages.en]: en-en bitext"),
        ("de", 'source = "paranmt"\nkind = "bitext"\n', "[languages.de]: kind 'bitext' does not"),
        ("de", 'source = "paranmt"\nepochs = 3\n', "[languages.de]: unknown keys ['epochs']"),
        (
            "de",
            'source = "paranmt"\n[languages.de.training]\nepoch = 3\n',
            "[languages.de.training]: unknown keys ['epoch']",
        ),
        (
            "de",
            'source = "paranmt"\n[languages.de.training]\ndim = 0\n',
            "[languages.de.training]: invalid training settings: dim must",
        ),
        (
            "de",
            'source = "paranmt"\n[languages.de.filters]\nmin_len = 1\n',
            "[languages.de.filters]: unknown keys ['min_len']",
        ),
        (
            "de",
            'source = "opus"\ncorpora = [{ name = "Tanzil" }]\n',
            "[languages.de]: OPUS corpus config {'name': 'Tanzil'}: expected keys",
        ),
        ("de", 'source = "opus"\ncorpora = [3]\n', "[languages.de]: TypeError"),
        ("DE", 'source = "paranmt"\n', "[languages.DE]: 'DE' is not a language code"),
        ("de", 'source = "paranmt"\npretokenizer = "mecab"\n', "pretokenizer must be one of"),
        ("de", 'source = "paranmt"\nfilters = 3\n', "[languages.de.filters]: expected a table"),
        (
            "de",
            'source = "paranmt"\n[languages.de.filters]\nbitext_langid_rule = "majority"\n',
            "[languages.de.filters]: language-ID rule 'majority' is not one of",
        ),
        (
            "de",
            'source = "paranmt"\n[languages.de.filters]\nlangid_own_p = -1\n',
            "[languages.de.filters]: language-ID rule 'other_language': own_p must be",
        ),
    ],
)
def test_a_broken_language_table_breaks_only_that_language(
    code: str, table: str, message: str
) -> None:
    path = Path("/etc/psp/languages.toml")
    registry = parse_registry(f"[languages.{code}]\n{table}{VALID_PT}", path)
    assert registry.codes == [code, "pt"]  # file order, the broken one included
    assert registry["pt"].local_dir == "/data/en-pt"
    assert list(registry.languages) == ["pt"]
    assert registry.errors[code].startswith(f"{path} [languages.{code}")
    assert message in registry.errors[code]
    with pytest.raises(RegistryError) as error:
        registry[code]
    assert str(error.value) == registry.errors[code]


def test_byte_fallback_is_a_registry_setting_that_leaves_the_default_plan_alone() -> None:
    """Off, the vocabulary's plan settings (its stage's fingerprint) are those of a registry
    that never heard of it; on, they say so."""
    plain = parse_registry(VALID_PT, Path("x.toml"))["pt"].sentencepiece
    assert plain.byte_fallback is False and "byte_fallback" not in plain.plan_settings()
    text = "[defaults.sentencepiece]\nbyte_fallback = true\n" + VALID_PT
    settings = parse_registry(text, Path("x.toml"))["pt"].sentencepiece
    assert settings.plan_settings() == plain.plan_settings() | {"byte_fallback": True}


def test_an_incremental_retrains_rate_is_a_registry_setting() -> None:
    registry = parse_registry("[defaults.retrain]\nlr_scale = 0.5\n" + VALID_PT, Path("x.toml"))
    assert {registry[code].retrain.lr_scale for code in registry.codes} == {0.5}


@pytest.mark.parametrize(
    ("toml", "message"),
    [
        ("[defaults.training]\ndim = 3\n", "no [languages.X] tables"),
        ("[languages.de\n", "not valid TOML"),
        ("[model]\ndim = 3\n" + VALID_PT, "unknown top-level tables ['model']"),
        ("[defaults.filter]\nmin_score = 1\n" + VALID_PT, "unknown [defaults] tables ['filter']"),
        ("[defaults.filters]\nmin_len = 1\n" + VALID_PT, "[defaults.filters]: unknown keys"),
        ("[defaults.training]\nepoch = 1\n" + VALID_PT, "[defaults.training]: unknown keys"),
        (
            '[defaults.filters]\nlangid_other_p = "high"\n' + VALID_PT,
            "[defaults.filters]: language-ID rule 'other_language': other_p must be",
        ),
        ("[defaults]\ntraining = 3\n" + VALID_PT, "[defaults.training]: expected a table"),
        ("[defaults.retrain]\nlr_scale = 0\n" + VALID_PT, "lr_scale must be in (0, 1], got 0"),
        (
            '[defaults.retrain]\ninit_from = "fr"\n' + VALID_PT,
            'init_from must be "multi" or absent',
        ),
        (
            '[languages.de]\nsource = "ftp"\n[languages.fr]\nsource = "local"\n',
            "no usable language; fix these tables:\nlanguages.toml [languages.de]: source must "
            "be one of",
        ),
    ],
)
def test_a_broken_file_is_a_clear_error(toml: str, message: str) -> None:
    with pytest.raises(RegistryError, match="languages.toml") as error:
        parse_registry(toml, Path("languages.toml"))
    assert message in str(error.value)


def test_loading_warns_about_each_broken_language(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "languages.toml"
    path.write_text(f'[languages.fr]\nsource = "paranmt"\nepochs = 3\n{VALID_PT}')
    monkeypatch.setenv("PSP_LANGUAGES", str(path))
    with caplog.at_level(logging.WARNING, logger="assets.settings.languages"):
        registry = load_registry()
    assert registry.codes == ["fr", "pt"]
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1
    assert f"{path} [languages.fr]: unknown keys ['epochs']" in warnings[0]


def test_unknown_language_names_the_registry() -> None:
    with pytest.raises(KeyError, match="add a \\[languages.xx\\] table"):
        load_registry()["xx"]


@pytest.mark.slow
def test_a_broken_language_leaves_the_others_runnable(
    opus_server: OpusServer, tmp_path: Path
) -> None:
    english, german = english_german(30, seed=2)
    zip_bytes = build_moses_zip("Tanzil", "en", "de", english, german)
    opus_server.add_corpus("Tanzil", "v1", "en", "de", zip_bytes)
    registry = tmp_path / "languages.toml"
    registry.write_text(
        '[languages.de]\nsource = "opus"\ncorpora = [{ name = "Tanzil", version = "v1" }]\n'
        '[languages.fr]\nsource = "opus"\ncorpora = [{ name = "Tanzil", version = "v1" }]\n'
        "copora_cap = 5\n"
    )
    answer = materialize_raw_pairs_isolated(
        opus_server, tmp_path / "storage", "de", "fr", PSP_LANGUAGES=str(registry)
    )
    expected = f"{registry} [languages.fr]: unknown keys ['copora_cap']"
    assert expected in answer["stderr"]  # the warning when the code location loads
    assert answer["partitions"] == ["de", "fr"]
    de, fr = answer["runs"]["de"], answer["runs"]["fr"]
    assert de["success"], de["failures"]
    assert pair_file_info(tmp_path / "storage" / "de" / "raw_pairs" / "pairs.parquet")[0] == 30
    assert not fr["success"]
    assert "STEP_UP_FOR_RETRY" not in fr["events"]
    assert len(fr["failures"]) == 1 and expected in fr["failures"][0]
    assert fr["seconds"] < 10


def test_the_multilingual_model_is_a_registry_setting() -> None:
    shipped = load_registry()
    assert shipped.multi_languages() == PAPER_LANGUAGES  # default: every language
    assert shipped.multi.pretokenizer == "none"
    assert shipped.multi.sentencepiece.vocab_size == 50_000  # the paper's shared vocabulary
    spec = shipped.multi.as_language()
    assert (spec.code, spec.kind, spec.pretokenizer) == ("multi", "mixed", "none")
    chosen = parse_registry(
        VALID_PT
        + '[languages.is]\nsource = "local"\nlocal_dir = "/x"\n'
        + '[multi]\nlanguages = ["is"]\nsampling_alpha = 0.3\n[multi.training]\nepochs = 2\n',
        Path("languages.toml"),
    )
    assert chosen.multi_languages() == ["is"] and chosen.multi.sampling_alpha == 0.3
    assert chosen.multi.as_language().train_config().epochs == 2


@pytest.mark.parametrize(
    ("multi", "message"),
    [
        ('languages = ["xx"]', "[multi]: languages ['xx'] have no [languages.X] table"),
        ("sampling_alpha = 2", "[multi]: sampling_alpha must be a number in [0, 1]"),
        ("alpha = 0.5", "[multi]: unknown keys ['alpha']"),
        ('pretokenizer = "mecab"', "[multi]: pretokenizer must be one of"),
        ('[multi.retrain]\ninit_from = "multi"', "[multi].retrain: init_from is a language's"),
    ],
)
def test_a_broken_multi_table_is_a_clear_error(multi: str, message: str) -> None:
    with pytest.raises(RegistryError) as error:
        parse_registry(VALID_PT + "[multi]\n" + multi + "\n", Path("languages.toml"))
    assert message in str(error.value)


def test_a_broken_language_of_the_multilingual_model_is_named() -> None:
    registry = parse_registry(
        VALID_PT + '[languages.fr]\nsource = "ftp"\n[multi]\nlanguages = ["pt", "fr"]\n',
        Path("languages.toml"),
    )
    with pytest.raises(RegistryError, match=r"\[languages.fr\]: source must be one of"):
        registry.multi_languages()
