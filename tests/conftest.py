"""Shared fixtures: a tiny generated parallel "language", its sentencepiece model, and helpers
that build training files and model bundles from it. Everything is generated offline."""

from __future__ import annotations

import io
import os
import random
import sys
from collections.abc import MutableMapping
from pathlib import Path

import numpy as np
import pytest
import sentencepiece as spm

from psp_core.inference.model import PSPModel
from psp_core.models.bundle import BundleConfig
from psp_core.tokenization.tokenizer import Tokenizer
from psp_core.training.training_file import TrainingFileWriter

SHARED_DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data"


def one_openmp_thread_unless_set(environment: MutableMapping[str, str]) -> bool:
    """Set ``OMP_NUM_THREADS=1`` in ``environment`` unless the caller set it; whether it did."""
    if "OMP_NUM_THREADS" in environment:
        return False
    environment["OMP_NUM_THREADS"] = "1"
    return True


def pytest_configure(config: pytest.Config) -> None:
    """One OpenMP thread for torch in this process and the processes the tests start, unless
    the caller set ``OMP_NUM_THREADS``: the tests run side by side, one xdist worker per core,
    and a torch parallel region whose other thread waits for a core held by the other worker
    spins on its own (benchmarks/RESULTS.md#test-suite)."""
    if one_openmp_thread_unless_set(os.environ) and "torch" in sys.modules:
        sys.modules["torch"].set_num_threads(1)  # (imported before this hook: too late for it)


def _word(rng: random.Random, letters: str) -> str:
    return "".join(rng.choice(letters) for _ in range(rng.randint(3, 8)))


class ToyLanguage:
    """Two made-up languages with a word-for-word translation table."""

    def __init__(self, seed: int = 0, n_words: int = 120) -> None:
        rng = random.Random(seed)
        self.source_words = sorted({_word(rng, "abcdefghij") for _ in range(n_words)})
        self.target_words = [_word(rng, "klmnopqrstu") for _ in self.source_words]
        self.translate_word = dict(zip(self.source_words, self.target_words, strict=True))

    def pairs(self, n: int, seed: int = 1) -> list[tuple[str, str]]:
        rng = random.Random(seed)
        result = []
        for _ in range(n):
            words = [rng.choice(self.source_words) for _ in range(rng.randint(3, 9))]
            result.append(
                (" ".join(words).capitalize(), " ".join(self.translate_word[w] for w in words))
            )
        return result


@pytest.fixture(scope="session")
def toy() -> ToyLanguage:
    return ToyLanguage()


def toy_sentencepiece(
    toy: ToyLanguage, pairs: int, vocab_size: int, *, seed: int = 1, **options
) -> bytes:
    """A sentencepiece model trained on both sides (lowercased) of ``pairs`` pairs of the toy
    language drawn with ``seed``; the other ``options`` go to sentencepiece."""
    model = io.BytesIO()
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter([s.lower() for pair in toy.pairs(pairs, seed=seed) for s in pair]),
        model_writer=model,
        vocab_size=vocab_size,
        hard_vocab_limit=False,
        minloglevel=2,
        **options,
    )
    return model.getvalue()


@pytest.fixture(scope="session")
def spm_proto(toy: ToyLanguage) -> bytes:
    return toy_sentencepiece(toy, 3000, 400, seed=99, character_coverage=1.0)


@pytest.fixture(scope="session")
def spm_path(tmp_path_factory, spm_proto: bytes) -> Path:
    path = tmp_path_factory.mktemp("spm") / "toy.model"
    path.write_bytes(spm_proto)
    return path


@pytest.fixture(scope="session")
def tokenizer(spm_proto: bytes) -> Tokenizer:
    return Tokenizer(spm_proto)


def write_training_file(
    path: Path, tokenizer: Tokenizer, pairs: list[tuple[str, str]], *, lang="xx", kind="bitext"
) -> Path:
    with TrainingFileWriter(
        path, vocab_size=tokenizer.vocab_size, spm_sha256=tokenizer.sha256, lang=lang, kind=kind
    ) as writer:
        for start in range(0, len(pairs), 500):
            chunk = pairs[start : start + 500]
            writer.append(
                tokenizer.encode([p[0] for p in chunk]), tokenizer.encode([p[1] for p in chunk])
            )
    return path


@pytest.fixture(scope="session")
def toy_training_file(tmp_path_factory, toy: ToyLanguage, tokenizer: Tokenizer) -> Path:
    path = tmp_path_factory.mktemp("data") / "toy.h5"
    return write_training_file(path, tokenizer, toy.pairs(2000))


def random_model(tokenizer: Tokenizer, dim: int = 16, seed: int = 0) -> PSPModel:
    embeddings = np.random.default_rng(seed).normal(size=(tokenizer.vocab_size, dim))
    config = BundleConfig(dim=dim, vocab_size=tokenizer.vocab_size, spm_sha256=tokenizer.sha256)
    return PSPModel(tokenizer, embeddings.astype(np.float32), config)


@pytest.fixture()
def model(tokenizer: Tokenizer) -> PSPModel:
    return random_model(tokenizer)


@pytest.fixture()
def bundle(tmp_path: Path, model: PSPModel) -> Path:
    return model.save(tmp_path / "bundle")


def require_shared_data(*parts: str) -> Path:
    path = SHARED_DATA.joinpath(*parts)
    if not path.exists():
        pytest.skip(f"real data not found at {path} (../shared/data is absent); skipping")
    return path


REAL_PAIRS = 20_000


@pytest.fixture(scope="session")
def real_en_de_bundles(tmp_path_factory) -> tuple[Path, Path]:
    """(untrained, trained) model bundles from a slice of the real en-de bitext: every 4th of
    the first 80k pairs (a mix of the corpus's sources), vocab 8k, dim 300, one epoch at lr 0.05.
    Trained once per session; skipped when ``../shared/data`` is absent."""
    from itertools import islice

    from ops.sources.text_io import read_aligned
    from ops.training_data.packing import pack_pairs
    from ops.training_data.sentencepiece_model import train_sentencepiece
    from psp_core import TrainConfig, train

    bitext = require_shared_data("bitext", "en-de")
    work = tmp_path_factory.mktemp("real-en-de")
    pairs = list(
        islice(
            read_aligned(bitext / "combined.en.gz", bitext / "combined.de.gz"),
            0,
            4 * REAL_PAIRS,
            4,
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
    return initial.bundle, trained.bundle


@pytest.fixture(scope="session")
def german_numbers_spm(tmp_path_factory) -> Path:
    """A 600-piece sentencepiece model of generated English, German and sentences full of
    numbers (many words of several pieces, and runs of digits whose segmentations nearly tie):
    the word cache's and the word sums' tests."""
    from ops.training_data.sentencepiece_model import train_sentencepiece
    from tests.pipelines.corpora import english_german

    english, german = english_german(3000, seed=3)
    numbers = [f"{n} people live in {n % 97} towns, about {n * 1000}." for n in range(3000)]
    return train_sentencepiece(
        [s.lower() for s in english + german + numbers],
        tmp_path_factory.mktemp("spm") / "spm.model",
        vocab_size=600,
    )
