"""hold_back(): pairs set aside for the dev suite by their own hash, nothing left for training
that shares a sentence with them (either side), whatever the file's order, and new pairs that
move no earlier pair between training and development."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from ops.pairs.held_back import POOL_FACTOR, held_back_rate, hold_back
from ops.pairs.pair_files import PairWriter, iter_pairs


def write_pairs(path: Path, pairs: list[tuple[str, str]], batch: int = 13) -> None:
    with PairWriter(path, src_lang="en", tgt_lang="de") as writer:
        for start in range(0, len(pairs), batch):
            part = pairs[start : start + batch]
            writer.write([a for a, _ in part], [b for _, b in part])


def corpus(n: int = 1000) -> list[tuple[str, str]]:
    """Pairs whose sides repeat: sentence i // 3 on the English side, i // 2 on the German."""
    return [(f"english {i // 3}", f"deutsch {i // 2} {i % 7}") for i in range(n)]


def test_held_back_pairs_share_no_sentence_with_training(tmp_path) -> None:
    source, train, dev = (
        tmp_path / "in.parquet",
        tmp_path / "train.parquet",
        tmp_path / "dev.parquet",
    )
    pairs = corpus()
    write_pairs(source, pairs)

    report = hold_back(source, train, dev, rate=0.04)

    held, kept = list(iter_pairs(dev)), list(iter_pairs(train))
    assert 20 < len(held) < 60 and set(held) <= set(pairs)
    sentences = {s for pair in held for s in pair}
    assert not any(a in sentences or b in sentences for a, b in kept)
    # every pair is accounted for: kept, held back, or dropped for sharing a held-back sentence
    assert report.n_in == 1000 and report.n_out == len(kept)
    assert report.dropped["held_back"] == len(held)
    assert report.dropped["shares_a_held_back_sentence"] == 1000 - len(held) - len(kept) > 0
    # the only pairs dropped are those sharing a sentence
    lost = set(pairs) - set(kept) - set(held)
    assert all(a in sentences or b in sentences for a, b in lost)


def test_the_sample_is_seeded_and_independent_of_the_order(tmp_path) -> None:
    pairs = corpus(600)
    shuffled = pairs[:]
    random.Random(3).shuffle(shuffled)
    held = []
    for name, rows, seed in [("a", pairs, 29), ("b", shuffled, 29), ("c", pairs, 30)]:
        write_pairs(tmp_path / f"{name}.parquet", rows)
        hold_back(
            tmp_path / f"{name}.parquet",
            tmp_path / f"{name}-train.parquet",
            tmp_path / f"{name}-dev.parquet",
            rate=0.05,
            seed=seed,
        )
        held.append(set(iter_pairs(tmp_path / f"{name}-dev.parquet")))
    assert held[0] == held[1] and held[0] != held[2]


@pytest.mark.parametrize(
    ("n", "expected"),
    [(0, 0.05), (12, 0.05), (40_000, 0.05), (40_001, 0.025), (80_000, 0.025), (10**7, 0.05 / 256)],
)
def test_the_rate_halves_each_time_the_corpus_doubles_past_the_bound(n, expected) -> None:
    assert held_back_rate(n) == expected
    assert n * held_back_rate(n) <= 2000


def split(tmp_path, name: str, pairs: list[tuple[str, str]]) -> tuple[set, set]:
    """(held-back pairs, training pairs) of ``pairs`` split with the default rate."""
    write_pairs(tmp_path / f"{name}.parquet", pairs, batch=5000)
    train, dev = tmp_path / f"{name}-train.parquet", tmp_path / f"{name}-dev.parquet"
    hold_back(tmp_path / f"{name}.parquet", train, dev)
    return set(iter_pairs(dev)), set(iter_pairs(train))


def distinct_pairs(n: int, seed: int) -> list[tuple[str, str]]:
    return [(f"english {seed} {i}", f"deutsch {seed} {i}") for i in range(n)]


@pytest.mark.parametrize("n", [4_000, 50_000])  # 5% of the pairs; 2,000 of them, about
def test_new_pairs_move_no_pair_between_training_and_development(tmp_path, n) -> None:
    """A corpus, then the corpus with 15% new pairs (in another order): every pair held back
    the first time is held back again, and no pair trained on the first time is a dev pair."""
    first = distinct_pairs(n, seed=1)
    held, trained = split(tmp_path, "first", first)
    assert 0.8 * n * held_back_rate(n) < len(held) < 1.2 * n * held_back_rate(n)
    grown = distinct_pairs(n * 15 // 100, seed=2) + first
    random.Random(5).shuffle(grown)
    held_again, trained_again = split(tmp_path, "grown", grown)
    assert held <= held_again and not trained & held_again
    assert trained <= trained_again  # (no pair shares a sentence with another here)
    assert len(held_again - held) > 0  # some new pairs are held back


def test_a_doubled_corpus_sends_dev_pairs_to_training_never_back(tmp_path) -> None:
    first = distinct_pairs(30_000, seed=1)
    held, trained = split(tmp_path, "first", first)
    held_again, trained_again = split(tmp_path, "doubled", first + distinct_pairs(30_000, 2))
    assert not trained & held_again  # never a pair trained on before
    assert len(held_again) <= 2200 and len(held & trained_again) > 0


def test_a_tiny_file_keeps_most_pairs_for_training(tmp_path) -> None:
    source, train, dev = (
        tmp_path / "in.parquet",
        tmp_path / "train.parquet",
        tmp_path / "dev.parquet",
    )
    write_pairs(source, corpus(12))
    report = hold_back(source, train, dev)
    held = list(iter_pairs(dev))
    assert (
        len(held)
        + len(list(iter_pairs(train)))
        + report.dropped.get("shares_a_held_back_sentence", 0)
        == 12
    )
    assert len(list(iter_pairs(train))) == report.n_out >= 6


def test_the_pool_is_training_pairs_below_ten_times_the_rate_and_stays_as_pairs_arrive(
    tmp_path,
) -> None:
    """The dev suite's distractors: training pairs only (none shares a held-back sentence),
    about POOL_FACTOR times as many as are held back, chosen by their own key, so new pairs
    leave every pooled pair in the pool (within a doubling)."""
    pairs = corpus(4000)
    write_pairs(tmp_path / "in.parquet", pairs)
    train, dev, pool = (tmp_path / f"{name}.parquet" for name in ("train", "dev", "pool"))
    report = hold_back(tmp_path / "in.parquet", train, dev, pool_output=pool, rate=0.01)
    held, kept, pooled = (set(iter_pairs(path)) for path in (dev, train, pool))
    assert pooled <= kept and report.notes["dev_pool"] == len(pooled)
    # keys below 10x the rate, less the held-back ones and those sharing their sentences
    assert 0.6 * POOL_FACTOR * len(held) < len(pooled) < 1.2 * POOL_FACTOR * len(held)
    grown = corpus(4000) + distinct_pairs(400, seed=3)
    random.Random(2).shuffle(grown)
    write_pairs(tmp_path / "grown.parquet", grown)
    again = tmp_path / "pool-again.parquet"
    hold_back(tmp_path / "grown.parquet", train, dev, pool_output=again, rate=0.01)
    pooled_again = set(iter_pairs(again))
    assert pooled <= pooled_again and len(pooled_again - pooled) > 0
