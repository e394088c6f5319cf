"""Brief training on a slice of the real en-de bitext lifts STS clearly above initialization.

Skipped with a message when ``../shared/data`` is absent.
"""

import glob
from itertools import islice

import numpy as np
import pytest

from ops.packing import pack_pairs
from ops.sentencepiece_model import train_sentencepiece
from ops.text_io import read_aligned
from psp_core import Tokenizer, TrainConfig, load_model, train
from psp_core.evaluation import StsEvaluator
from tests.conftest import require_shared_data

pytestmark = [pytest.mark.real_data, pytest.mark.slow]
N_PAIRS = 20_000


def sts_scores(model, eval_dir):
    en_en = StsEvaluator(eval_dir / "sts17" / "en-en.tsv")(model)
    per_year = [
        np.mean(
            [StsEvaluator(f)(model) for f in sorted(glob.glob(str(eval_dir / "sts" / y / "*.tsv")))]
        )
        for y in ("2012", "2013", "2014")
    ]
    return en_en, float(np.mean(per_year))


def test_brief_training_on_real_bitext_beats_initialization(tmp_path):
    bitext = require_shared_data("bitext", "en-de")
    eval_dir = require_shared_data("eval")
    # every 4th pair over the first 80k: a slice that mixes the corpus's sources
    pairs = list(
        islice(
            read_aligned(bitext / "combined.en.gz", bitext / "combined.de.gz"), 0, 4 * N_PAIRS, 4
        )
    )
    spm_path = train_sentencepiece(
        (s.lower() for pair in pairs for s in pair), tmp_path / "spm.model", vocab_size=8000
    )
    data = tmp_path / "train.h5"
    pack_pairs(pairs, Tokenizer.from_file(spm_path), data, lang="de")
    config = dict(dim=300, max_megabatch=20, anneal_every=10, lr=0.05, log_every=0)
    initial = train(data, spm_path, tmp_path / "init", TrainConfig(**config, max_steps=0))
    trained = train(data, spm_path, tmp_path / "trained", TrainConfig(**config, epochs=1))
    before = sts_scores(load_model(initial.bundle), eval_dir)
    after = sts_scores(load_model(trained.bundle), eval_dir)
    print(
        f"STS17 en-en {before[0]:.1f} -> {after[0]:.1f}; STS12-14 {before[1]:.1f} -> {after[1]:.1f}"
    )
    assert after[0] > before[0] + 5, (before, after)
    assert after[1] > before[1] + 5, (before, after)
