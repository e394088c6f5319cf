"""Model cards: every bundle has a README.md in Hugging Face's conventions, with what the
model was trained on, how, and how it scores; exports carry it, naming their library."""

from __future__ import annotations

import dataclasses
import os

import pytest
import yaml

from psp_core import TrainConfig, train
from psp_core.models.bundle import read_config
from psp_core.models.export import export_model
from psp_core.models.model_card import CardFacts, model_card, retarget_card, write_card

os.environ.setdefault("HF_HUB_OFFLINE", "1")


def front_matter(text: str) -> dict:
    assert text.startswith("---\n")
    return yaml.safe_load(text.split("---\n")[1])


@pytest.fixture(scope="module")
def trained(tmp_path_factory, toy_training_file, spm_path):
    work = tmp_path_factory.mktemp("card")
    config = TrainConfig(
        dim=16, batch_size=32, max_megabatch=2, anneal_every=0, log_every=0, lr=0.05, epochs=2
    )
    return train(toy_training_file, spm_path, work / "model", config).bundle


def test_a_trained_bundle_has_a_card_with_its_settings_run_and_history(trained) -> None:
    text = (trained / "README.md").read_text()
    meta = front_matter(text)
    config = read_config(trained)
    assert meta["language"] == config.languages
    assert meta["library_name"] == "psp_core" and meta["license"] == "other"
    assert meta["pipeline_tag"] == "sentence-similarity" and "p-sp" in meta["tags"]
    assert "| dimension | 16 |" in text
    assert "| device | cpu |" in text and "| epochs | 2 |" in text
    # the per-epoch history: two rows after the header
    epochs = [line for line in text.splitlines() if line.startswith(("| 1 |", "| 2 |"))]
    assert len(epochs) == 2
    assert "load_model" in text and "## Citation" in text


def test_the_card_shows_sources_funnel_and_evaluation_when_given(trained) -> None:
    facts = CardFacts(
        name="psp-de",
        sources=[{"source": "Europarl", "lines_read": 2_000_000, "pairs_kept": 1_900_000}],
        funnel=[("length_filtered_pairs", {"n_in": 10, "n_out": 7, "dropped": {"long": 3}})],
        training={"seconds": 600, "started": 1_790_000_000, "ended": 1_790_000_600},
        evaluation_markdown="| Tatoeba error % | n |\n|---|---:|\n| deu | 1000 |",
    )
    text = model_card(read_config(trained), facts)
    assert text.splitlines()[text.splitlines().index("---", 1) + 2] == "# psp-de"
    assert "| Europarl | 2,000,000 | 1,900,000 |" in text
    assert "| length_filtered_pairs | 10 | 7 | long: 3 |" in text
    assert "| training time | 10.0 min |" in text and "2026-" in text
    assert "## Evaluation" in text and "| deu | 1000 |" in text


def test_a_card_retargeted_to_another_library_names_it_and_its_loading_code(trained) -> None:
    text = model_card(read_config(trained))
    for library, loader in [
        ("sentence-transformers", "SentenceTransformer("),
        ("model2vec", "StaticModel.from_pretrained("),
    ]:
        other = retarget_card(text, library)
        meta = front_matter(other)
        assert meta["library_name"] == library
        assert ("sentence-transformers" in meta["tags"]) == (library == "sentence-transformers")
        assert loader in other and "load_model(" not in other
        assert retarget_card(other, "psp_core") == text  # and back


def test_write_card_replaces_atomically(tmp_path) -> None:
    write_card(tmp_path, "first")
    write_card(tmp_path, "second")
    assert (tmp_path / "README.md").read_text() == "second"
    assert [p.name for p in tmp_path.iterdir()] == ["README.md"]


@pytest.mark.parametrize("library", ["sentence-transformers", "model2vec"])
def test_exports_carry_the_card(tmp_path, trained, library) -> None:
    module = "sentence_transformers" if library == "sentence-transformers" else "model2vec"
    pytest.importorskip(module, reason=f"{module} is not installed (pip install '.[export]')")
    output = export_model(trained, library, tmp_path / library)
    text = (output / "README.md").read_text()
    assert front_matter(text)["library_name"] == library
    assert "| dimension | 16 |" in text  # the bundle's card, not the library's own


def test_the_card_names_its_license_scales_and_dev_metric(trained) -> None:
    text = model_card(
        read_config(trained), CardFacts(evaluation_markdown="| STS | n |\n|---|---:|\n| x | 1 |")
    )
    meta = front_matter(text)
    assert meta["license"] == "other" and meta["license_name"] and meta["license_link"]
    assert "## License notes" in text  # what the link points at
    assert "Pearson and Spearman x 100" in text and "error rates in %" in text
    assert "| dev score (higher is better) |" in text
    assert "The dev score is the model selection's" not in text  # (trained without one)
    config = read_config(trained)
    history = [{"epoch": 0, "steps": 9, "loss": 0.5, "pairs_per_second": 9.0, "dev_score": 80.1}]
    selected = dataclasses.replace(config, training={**config.training, "history": history})
    text = model_card(selected)
    assert "| 80.1 |" in text and "The dev score is the model selection's: Pearson x 100" in text


@pytest.mark.parametrize("library", ["sentence-transformers", "model2vec"])
def test_no_exported_file_names_a_folder_of_this_machine(tmp_path, trained, library) -> None:
    """An export is published: its files name the source bundle by content, never by path."""
    module = "sentence_transformers" if library == "sentence-transformers" else "model2vec"
    pytest.importorskip(module, reason=f"{module} is not installed (pip install '.[export]')")
    output = export_model(trained, library, tmp_path / "where-i-work" / library)
    machine_paths = {str(trained.parent.resolve()), str(tmp_path.resolve()), str(tmp_path)}
    for path in output.rglob("*"):
        if path.is_file() and path.suffix in (".json", ".md", ".txt", ".yaml", ""):
            text = path.read_text(encoding="utf-8", errors="replace")
            assert not [m for m in machine_paths if m in text], path
    record = __import__("json").loads((output / "psp_export.json").read_text())
    assert record["source_bundle"] == trained.name and record["source_files"]
