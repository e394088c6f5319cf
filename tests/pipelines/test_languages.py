"""The language registry: the shipped file is the paper's setup; bad entries are clear errors."""

from __future__ import annotations

from pathlib import Path

import pytest

from ops.opus import paper_corpora
from pipelines.languages import RegistryError, load_registry, parse_registry
from psp_core.training import TrainConfig

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
    assert registry["zh"].pretokenizer == "jieba"
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


@pytest.mark.parametrize(
    ("toml", "message"),
    [
        ('[languages.de]\nsource = "opus"\n', "non-empty corpora"),
        ('[languages.de]\nsource = "ftp"\n', "source must be one of"),
        ('[languages.de]\nsource = "local"\n', "local_dir is required"),
        ('[languages.en]\nsource = "local"\nlocal_dir = "x"\n', "en-en bitext"),
        ('[languages.de]\nsource = "paranmt"\nkind = "bitext"\n', "does not fit source"),
        ('[languages.de]\nsource = "paranmt"\nepochs = 3\n', "unknown keys ['epochs']"),
        ('[languages.de]\nsource = "paranmt"\n[languages.de.training]\nepoch = 3\n', "epoch"),
        ('[languages.de]\nsource = "paranmt"\n[languages.de.training]\ndim = 0\n', "dim must"),
        ('[languages.de]\nsource = "paranmt"\n[languages.de.filters]\nmin_len = 1\n', "min_len"),
        ('[languages.de]\nsource = "opus"\ncorpora = [{ name = "Tanzil" }]\n', "expected keys"),
        ('[languages.DE]\nsource = "paranmt"\n', "not a language code"),
        ('[languages.de]\nsource = "paranmt"\npretokenizer = "mecab"\n', "pretokenizer"),
        ("[defaults.training]\ndim = 3\n", "no [languages.X] tables"),
        ("[languages.de\n", "not valid TOML"),
    ],
)
def test_malformed_registry_is_a_clear_error(toml: str, message: str) -> None:
    with pytest.raises(RegistryError, match="languages.toml") as error:
        parse_registry(toml, Path("languages.toml"))
    assert message in str(error.value)


def test_unknown_language_names_the_registry() -> None:
    with pytest.raises(KeyError, match="add a \\[languages.xx\\] table"):
        load_registry()["xx"]
