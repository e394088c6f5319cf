"""ops.pairs.pair_lineage: the lineage keys of pairs, new and seen pairs against a version's keys, the
replay sample, and the vocabulary's fit."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from ops.pairs.pair_files import PairWriter, iter_pairs
from ops.pairs.pair_lineage import (
    count_new_and_seen,
    merge_keys,
    pair_keys,
    split_new_and_seen,
    vocabulary_fit,
    write_pair_keys,
)


def write_pairs(path: Path, pairs: list[tuple[str, str]]) -> Path:
    with PairWriter(path, src_lang="en", tgt_lang="de") as writer:
        writer.write([s for s, _ in pairs], [t for _, t in pairs])
    return path


def test_keys_are_the_pairs_whatever_the_order(tmp_path, toy):
    pairs = toy.pairs(500, seed=3)
    forward = write_pairs(tmp_path / "a.parquet", pairs)
    backward = write_pairs(tmp_path / "b.parquet", pairs[::-1] + pairs[:10])
    keys = pair_keys(forward)
    assert np.array_equal(keys, pair_keys(backward))
    assert len(keys) == len(set(pairs)) and np.all(np.diff(keys.astype(np.float64)) >= 0)
    assert write_pair_keys(forward, tmp_path / "keys.npy") == len(keys)
    assert np.array_equal(np.load(tmp_path / "keys.npy"), keys)


def test_new_pairs_all_and_a_replay_sample_of_the_seen_ones(tmp_path, toy):
    old = sorted(set(toy.pairs(3000, seed=4)))
    new = sorted(set(toy.pairs(400, seed=5)) - set(old))
    write_pair_keys(write_pairs(tmp_path / "old.parquet", old), tmp_path / "old.npy")
    corpus = write_pairs(tmp_path / "now.parquet", old[:2000] + new)

    n_new, n_seen, new_text, seen_text = count_new_and_seen(corpus, tmp_path / "old.npy")
    assert (n_new, n_seen) == (len(new), 2000)
    assert set(new_text) <= {s for pair in new for s in pair} and seen_text

    split, new_keys = split_new_and_seen(
        corpus,
        tmp_path / "old.npy",
        tmp_path / "out.parquet",
        replay_pairs=400,
        n_seen=2000,
        seed=1,
    )
    written = set(iter_pairs(tmp_path / "out.parquet"))
    assert set(new) <= written and written - set(new) <= set(old[:2000])
    assert split.new_pairs == len(new) and split.replay_pairs == len(written) - len(new)
    assert 300 < split.replay_pairs < 500  # about the 400 asked for (a hash decides)
    assert np.array_equal(new_keys, pair_keys(write_pairs(tmp_path / "n.parquet", new)))
    # another seed, another sample
    split_b, _ = split_new_and_seen(
        corpus, tmp_path / "old.npy", tmp_path / "b.parquet", replay_pairs=400, n_seen=2000, seed=2
    )
    assert set(iter_pairs(tmp_path / "b.parquet")) != written
    # more replay asked for than there are seen pairs: every seen pair
    split_all, _ = split_new_and_seen(
        corpus, tmp_path / "old.npy", tmp_path / "c.parquet", replay_pairs=5000, n_seen=2000, seed=1
    )
    assert split_all.replay_pairs == 2000

    assert merge_keys(tmp_path / "old.npy", new_keys, tmp_path / "all.npy") == len(old) + len(new)
    assert np.array_equal(
        np.load(tmp_path / "all.npy"), pair_keys(write_pairs(tmp_path / "u.parquet", old + new))
    )


def test_vocabulary_fit_sees_another_alphabet(spm_path, toy):
    own = [s.lower() for pair in toy.pairs(200, seed=6) for s in pair]
    greek = [f"{s} ωμέγα θάλασσα" for s in own]
    fits = vocabulary_fit(spm_path, own)
    unfit = vocabulary_fit(spm_path, greek)
    assert fits.sentences == unfit.sentences == len(own)
    assert fits.unknown_share < 0.01 < unfit.unknown_share
    assert fits.pieces_per_word > 0
