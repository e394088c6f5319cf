import numpy as np
import pytest
import torch

from psp_core.mining import mine_hard_negatives, sentence_hashes
from psp_core.tokenizer import flatten_id_lists


def hashes(id_lists):
    batch = flatten_id_lists(id_lists)
    return torch.from_numpy(sentence_hashes(batch.ids, batch.offsets))


def test_sentence_hashes_equal_iff_sequences_equal():
    h = hashes([[1, 2, 3], [1, 2, 3], [3, 2, 1], [1, 2], [], [], [1, 2, 3, 0]]).tolist()
    assert h[0] == h[1]
    assert len({h[0], h[2], h[3], h[4], h[6]}) == 5
    assert h[4] == h[5]


def unit(*rows):
    return torch.tensor(rows, dtype=torch.float32)


def test_bitext_picks_most_similar_opposite_side_sentence_but_not_the_partner():
    # three pairs; source 0 is closest to its partner t0, then to t2
    source = unit([1.0, 0.0], [0.0, 1.0], [0.7, 0.7])
    target = unit([1.0, 0.05], [-1.0, 0.0], [0.9, 0.3])
    negatives = mine_hard_negatives(
        source, target, hashes([[1], [2], [3]]), hashes([[11], [12], [13]])
    )
    assert negatives.for_source.tolist()[0] == 2  # t2, not the partner t0
    # target 1 = (-1, 0): cosines with s0 = -1, s2 = -0.7 -> s2 is the hardest
    assert negatives.for_target.tolist()[1] == 2
    assert all(negatives.for_source[i] != i for i in range(3))
    assert all(negatives.for_target[i] != i for i in range(3))


def test_a_duplicate_of_the_positive_is_never_picked():
    # t2 has the same ids as t0 (a duplicate translation) and is the closest to s0
    source = unit([1.0, 0.0], [0.0, 1.0], [0.0, -1.0])
    target = unit([1.0, 0.0], [0.5, 0.5], [1.0, 0.0])
    negatives = mine_hard_negatives(
        source, target, hashes([[1], [2], [3]]), hashes([[7, 7], [8], [7, 7]])
    )
    assert negatives.for_source.tolist()[0] == 1


def test_paraphrase_mode_pools_both_sides_and_excludes_self_partner_and_copies():
    source = unit([1.0, 0.0], [0.0, 1.0], [0.9, 0.1])
    target = unit([0.95, 0.05], [0.1, 0.9], [0.0, -1.0])
    negatives = mine_hard_negatives(
        source,
        target,
        hashes([[1], [2], [3]]),
        hashes([[4], [5], [6]]),
        negatives_from="any",
    )
    # pool = [s0, s1, s2, t0, t1, t2]; for s0 the closest other than s0 itself and t0 is s2
    assert negatives.for_source.tolist()[0] == 2
    for i, chosen in enumerate(negatives.for_source.tolist()):
        assert chosen not in (i, 3 + i)
    for i, chosen in enumerate(negatives.for_target.tolist()):
        assert chosen not in (i, 3 + i)


def test_no_valid_candidate_gives_minus_one():
    source = unit([1.0, 0.0])
    target = unit([0.0, 1.0])
    negatives = mine_hard_negatives(source, target, hashes([[1]]), hashes([[2]]))
    assert negatives.for_source.tolist() == [-1]
    assert negatives.for_target.tolist() == [-1]


@pytest.mark.parametrize("negatives_from", ["opposite", "any"])
def test_chunked_mining_equals_one_block(negatives_from):
    rng = np.random.default_rng(0)
    source = torch.from_numpy(rng.normal(size=(300, 8)).astype(np.float32))
    target = torch.from_numpy(rng.normal(size=(300, 8)).astype(np.float32))
    id_lists = [[int(x)] for x in rng.integers(0, 50, size=600)]
    source_hash, target_hash = hashes(id_lists[:300]), hashes(id_lists[300:])
    whole = mine_hard_negatives(
        source, target, source_hash, target_hash, negatives_from=negatives_from, chunk_rows=10_000
    )
    chunked = mine_hard_negatives(
        source, target, source_hash, target_hash, negatives_from=negatives_from, chunk_rows=7
    )
    assert torch.equal(whole.for_source, chunked.for_source)
    assert torch.equal(whole.for_target, chunked.for_target)
    # and it is the brute-force answer, for both sides
    s = torch.nn.functional.normalize(source, dim=1)
    t = torch.nn.functional.normalize(target, dim=1)
    opposite = negatives_from == "opposite"
    for anchors, _partners, own_hash, partner_hash, pool, pool_hash, chosen in [
        (s, t, source_hash, target_hash, t if opposite else torch.cat([s, t]),
         target_hash if opposite else torch.cat([source_hash, target_hash]), whole.for_source),
        (t, s, target_hash, source_hash, s if opposite else torch.cat([s, t]),
         source_hash if opposite else torch.cat([source_hash, target_hash]), whole.for_target),
    ]:  # fmt: skip
        for i in range(0, 300, 37):
            scores = [
                (float(anchors[i] @ pool[j]), j)
                for j in range(len(pool))
                if pool_hash[j] not in (own_hash[i], partner_hash[i])
            ]
            assert chosen[i].item() == max(scores)[1]


def test_unknown_negative_source_is_refused():
    with pytest.raises(ValueError, match="negatives_from"):
        mine_hard_negatives(
            unit([1.0]), unit([1.0]), hashes([[1]]), hashes([[2]]), negatives_from="x"
        )


@pytest.mark.parametrize("negatives_from", ["opposite", "any"])
def test_bfloat16_mining_agrees_on_clear_cases(negatives_from):
    source = unit([1.0, 0.0], [0.0, 1.0], [0.7, 0.7])
    target = unit([1.0, 0.05], [-1.0, 0.0], [0.9, 0.3])
    args = (source, target, hashes([[1], [2], [3]]), hashes([[11], [12], [13]]))
    exact = mine_hard_negatives(*args, negatives_from=negatives_from)
    fast = mine_hard_negatives(*args, negatives_from=negatives_from, dtype=torch.bfloat16)
    assert torch.equal(exact.for_source, fast.for_source)
    assert torch.equal(exact.for_target, fast.for_target)
