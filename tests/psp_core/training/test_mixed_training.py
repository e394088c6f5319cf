"""Training files of several languages (the multilingual model): each pair's group survives
writing, reading and the epoch shuffle, and hard negatives follow each group's kind: bitext
negatives from the opposite side of every bitext pair of the mega-batch whatever its language,
paraphrase negatives from any paraphrase sentence, never across kinds (and the step's grouping
keys can restrict a group to its own pairs)."""

from __future__ import annotations

import json

import h5py
import numpy as np
import pytest
import torch

from psp_core.tokenization.csr import TokenBatch
from psp_core.tokenization.tokenizer import flatten_id_lists
from psp_core.training import TrainConfig
from psp_core.training.data import EpochStream, PairBatch
from psp_core.training.encoder import MeanEmbeddingEncoder
from psp_core.training.steps import StepSettings, _mine_by_group, encode
from psp_core.training.training_file import TrainingFile, TrainingFileError, TrainingFileWriter

GROUPS = ("de", "en", "zh")
KINDS = ("bitext", "paraphrase", "bitext")


def batch_of(rows: list[list[int]]) -> TokenBatch:
    return flatten_id_lists(rows)


def write_mixed(path, pairs: list[tuple[list[int], list[int], int]]):
    with TrainingFileWriter(
        path, vocab_size=100, spm_sha256="ab" * 32, lang="multi", groups=GROUPS, group_kinds=KINDS
    ) as writer:
        for start in range(0, len(pairs), 7):
            chunk = pairs[start : start + 7]
            writer.append(
                batch_of([s for s, _, _ in chunk]),
                batch_of([t for _, t, _ in chunk]),
                np.array([g for _, _, g in chunk]),
            )
    return path


def random_pairs(n: int, seed: int = 0) -> list[tuple[list[int], list[int], int]]:
    rng = np.random.default_rng(seed)
    return [
        (
            rng.integers(1, 100, size=rng.integers(1, 8)).tolist(),
            rng.integers(1, 100, size=rng.integers(1, 8)).tolist(),
            int(rng.integers(0, len(GROUPS))),
        )
        for _ in range(n)
    ]


def test_groups_survive_the_file_and_the_epoch_shuffle(tmp_path) -> None:
    pairs = random_pairs(60)
    path = write_mixed(tmp_path / "train.h5", pairs)
    with TrainingFile(path) as data:
        assert data.info.kind == "mixed"
        assert data.info.groups == GROUPS and data.info.group_kinds == KINDS
        assert data.info.group_pairs == tuple(
            sum(g == index for _, _, g in pairs) for index in range(len(GROUPS))
        )
        assert data.read_groups(0, 60).tolist() == [g for _, _, g in pairs]
        stream = EpochStream(data, seed=3, epoch=1, block_size=16)
        taken = PairBatch.concat([stream.take(25), stream.take(25), stream.take(25)])
    assert len(taken) == 60
    by_source = {tuple(s): g for s, _, g in pairs}
    for i in range(60):  # every pair keeps its own group through the shuffle
        assert taken.group[i] == by_source[tuple(taken.source.sentence(i).tolist())]


def test_a_mixed_file_is_checked(tmp_path) -> None:
    with pytest.raises(ValueError, match="group_kinds"):
        TrainingFileWriter(tmp_path / "x.h5", vocab_size=9, spm_sha256="a", lang="m", groups=["de"])
    writer = TrainingFileWriter(
        tmp_path / "x.h5", vocab_size=100, spm_sha256="a", lang="m", groups=["de"],
        group_kinds=["bitext"],
    )  # fmt: skip
    with writer, pytest.raises(ValueError, match="group"):
        writer.append(batch_of([[1]]), batch_of([[2]]))  # no group for a mixed file
    path = write_mixed(tmp_path / "train.h5", random_pairs(10))
    with h5py.File(path, "r+") as raw:
        raw.attrs["groups"] = json.dumps(["de"])  # fewer groups than kinds
    with pytest.raises(TrainingFileError, match="group_kinds"):
        TrainingFile(path)


def settings(within: str) -> StepSettings:
    rules = tuple("any" if kind == "paraphrase" else "opposite" for kind in KINDS)
    kinds = sorted(set(KINDS))
    keys = tuple(i if within == "language" else kinds.index(k) for i, k in enumerate(KINDS))
    return StepSettings(
        batch_size=8,
        margin=0.4,
        grad_clip=5.0,
        negatives_from="opposite",
        mining_chunk_rows=4,
        mining_screen=False,
        device=torch.device("cpu"),
        group_rules=rules,
        group_keys=keys,
    )


def mined(mega: PairBatch, within: str) -> tuple[np.ndarray, np.ndarray]:
    model = MeanEmbeddingEncoder(100, 16)
    model.reset_parameters(torch.Generator().manual_seed(0))
    with torch.no_grad():
        s, t = encode(model, mega.source, torch.device("cpu")), encode(model, mega.target, "cpu")
    from psp_core.training.steps import _hashes

    return _mine_by_group(
        mega, settings(within), s, t, _hashes(mega.source, "cpu"), _hashes(mega.target, "cpu")
    )


def mega_batch(n: int = 48) -> PairBatch:
    pairs = random_pairs(n, seed=1)
    return PairBatch(
        batch_of([s for s, _, _ in pairs]),
        batch_of([t for _, t, _ in pairs]),
        np.array([g for _, _, g in pairs]),
    )


@pytest.mark.parametrize("within", ["megabatch", "language"])
def test_each_kind_mines_by_its_own_rule(within: str) -> None:
    mega = mega_batch()
    n = len(mega)
    for_source, for_target = mined(mega, within)
    group = mega.group
    bitext = np.isin(group, [0, 2])
    for i in range(n):
        for chosen, own_side_is_source in ((for_source[i], True), (for_target[i], False)):
            assert chosen >= 0  # every group has other pairs to choose from
            row, is_target = chosen % n, chosen >= n
            assert row != i  # never the pair itself
            if bitext[i]:  # the opposite side of a bitext pair
                assert bitext[row] and is_target == own_side_is_source
                if within == "language":
                    assert group[row] == group[i]
            else:  # paraphrase: any paraphrase sentence
                assert group[row] == 1


def test_the_whole_mega_batch_mixes_languages_and_restricting_does_not() -> None:
    mega = mega_batch(96)
    n = len(mega)
    across, _ = mined(mega, "megabatch")
    within, _ = mined(mega, "language")
    bitext = np.flatnonzero(np.isin(mega.group, [0, 2]))
    crossed = [i for i in bitext if mega.group[across[i] % n] != mega.group[i]]
    assert crossed  # some hardest negatives are another language's sentences
    assert all(mega.group[within[i] % n] == mega.group[i] for i in bitext)


def test_a_mixed_file_trains_and_records_its_languages(tmp_path) -> None:
    import sentencepiece as spm

    from psp_core import load_model, train
    from psp_core.tokenization.tokenizer import Tokenizer

    corpus = tmp_path / "corpus.txt"
    words = ["haus", "house", "maison", "garten", "garden", "buch", "book", "livre"]
    rng = np.random.default_rng(0)
    corpus.write_text("\n".join(" ".join(rng.choice(words, size=5)) for _ in range(300)) + "\n")
    spm.SentencePieceTrainer.train(
        input=str(corpus), model_prefix=str(tmp_path / "spm"), vocab_size=40,
        hard_vocab_limit=False, minloglevel=2,
    )  # fmt: skip
    tokenizer = Tokenizer.from_file(tmp_path / "spm.model")
    sentences = [" ".join(rng.choice(words, size=4)) for _ in range(200)]
    encoded = tokenizer.encode(sentences)
    with TrainingFileWriter(
        tmp_path / "train.h5", vocab_size=tokenizer.vocab_size, spm_sha256=tokenizer.sha256,
        lang="multi", groups=GROUPS, group_kinds=KINDS,
    ) as writer:  # fmt: skip
        writer.append(encoded.slice(0, 100), encoded.slice(100, 200), np.arange(100) % 3)
    config = TrainConfig(
        dim=8, epochs=1, batch_size=10, max_megabatch=3, anneal_every=0, lr=0.01,
        device="cpu", num_threads=1,
    )  # fmt: skip
    result = train(
        tmp_path / "train.h5", tmp_path / "spm.model", tmp_path / "model", config,
        pretokenizer="rjieba_han",
    )  # fmt: skip
    model = load_model(result.bundle)
    assert model.config.languages == ["de", "en", "zh"]
    assert model.config.pretokenizer == "rjieba_han"
    assert model.config.training["negatives_from"] == "by kind, within the megabatch"
    assert np.isfinite(model.embed(["haus garten", "我们 house"])).all()
