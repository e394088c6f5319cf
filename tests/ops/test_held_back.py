"""hold_back(): a seeded sample of pairs set aside for the dev suite, and nothing left for
training that shares a sentence with it (either side), whatever the file's order."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from ops.held_back import held_back_count, hold_back
from ops.pair_files import PairWriter, iter_pairs


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

    report = hold_back(source, train, dev, count=40)

    held, kept = list(iter_pairs(dev)), list(iter_pairs(train))
    assert len(held) == 40 and set(held) <= set(pairs)
    sentences = {s for pair in held for s in pair}
    assert not any(a in sentences or b in sentences for a, b in kept)
    # every pair is accounted for: kept, held back, or dropped for sharing a held-back sentence
    assert report.n_in == 1000 and report.n_out == len(kept)
    assert report.dropped["held_back"] == 40
    assert report.dropped["shares_a_held_back_sentence"] == 1000 - 40 - len(kept) > 0
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
            count=25,
            seed=seed,
        )
        held.append(set(iter_pairs(tmp_path / f"{name}-dev.parquet")))
    assert held[0] == held[1] and held[0] != held[2]


@pytest.mark.parametrize(
    ("n", "expected"), [(0, 0), (10, 0), (100, 5), (39_999, 1999), (10**7, 2000)]
)
def test_how_many_are_held_back(n, expected) -> None:
    assert held_back_count(n) == expected


def test_a_tiny_file_keeps_every_pair_for_training(tmp_path) -> None:
    source, train, dev = (
        tmp_path / "in.parquet",
        tmp_path / "train.parquet",
        tmp_path / "dev.parquet",
    )
    write_pairs(source, corpus(12))
    report = hold_back(source, train, dev)  # 5% of 12: none held back
    assert list(iter_pairs(dev)) == [] and len(list(iter_pairs(train))) == 12 == report.n_out
