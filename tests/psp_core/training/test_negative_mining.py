import numpy as np
import pytest
import torch

from psp_core.tokenization.tokenizer import flatten_id_lists
from psp_core.training.negative_mining import (
    _at_least,
    _bf16_window,
    mine_hard_negatives,
    sentence_hashes,
)


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


def _random_case(n=300, dim=8, distinct=50, seed=0):
    """Embeddings where equal id sequences (many, from ``distinct`` ids) share a vector."""
    rng = np.random.default_rng(seed)
    ids = rng.integers(0, distinct, size=2 * n)
    vectors = torch.from_numpy(rng.normal(size=(distinct, dim)).astype(np.float32))[ids]
    all_hashes = hashes([[int(x)] for x in ids])
    return vectors[:n], vectors[n:], all_hashes[:n], all_hashes[n:]


def _check_against_brute_force(source, target, source_hash, target_hash, negatives, opposite):
    """Each chosen negative is allowed and as similar as the best allowed candidate (ties
    between copies of one sentence may go either way)."""
    s = torch.nn.functional.normalize(source, dim=1).double()
    t = torch.nn.functional.normalize(target, dim=1).double()
    both, both_hash = torch.cat([s, t]), torch.cat([source_hash, target_hash])
    for anchors, own_hash, partner_hash, pool, pool_hash, chosen in [
        (s, source_hash, target_hash, t if opposite else both,
         target_hash if opposite else both_hash, negatives.for_source),
        (t, target_hash, source_hash, s if opposite else both,
         source_hash if opposite else both_hash, negatives.for_target),
    ]:  # fmt: skip
        allowed = (pool_hash.unsqueeze(0) != own_hash.unsqueeze(1)) & (
            pool_hash.unsqueeze(0) != partner_hash.unsqueeze(1)
        )
        scores = (anchors @ pool.t()).masked_fill(~allowed, float("-inf"))
        best = scores.max(dim=1).values
        has_candidate = ~torch.isneginf(best)
        assert torch.equal(chosen >= 0, has_candidate)
        rows = torch.nonzero(has_candidate).squeeze(1)
        assert allowed[rows, chosen[rows]].all()
        torch.testing.assert_close(scores[rows, chosen[rows]], best[rows], atol=1e-6, rtol=0)


@pytest.mark.parametrize("screen", [False, True])
@pytest.mark.parametrize("negatives_from", ["opposite", "any"])
def test_mining_matches_brute_force_for_any_chunk_size(negatives_from, screen):
    case = _random_case()
    kwargs = dict(negatives_from=negatives_from, screen=screen)
    for chunk_rows in (10_000, 64):  # copies of a sentence tie exactly; either may be chosen
        negatives = mine_hard_negatives(*case, chunk_rows=chunk_rows, **kwargs)
        _check_against_brute_force(*case, negatives, negatives_from == "opposite")
    again = mine_hard_negatives(*case, chunk_rows=64, **kwargs)
    assert torch.equal(negatives.for_source, again.for_source)  # deterministic
    assert torch.equal(negatives.for_target, again.for_target)


@pytest.mark.slow
@pytest.mark.parametrize("negatives_from", ["opposite", "any"])
def test_bfloat16_screening_gives_the_float32_negatives(negatives_from):
    # near ties everywhere: 900 noisy copies of 30 directions in 64 dimensions
    rng = np.random.default_rng(3)
    centres = rng.normal(size=(30, 64))
    vectors = centres[rng.integers(0, 30, size=1800)] + 0.05 * rng.normal(size=(1800, 64))
    vectors = torch.from_numpy(vectors.astype(np.float32))
    all_hashes = hashes([[i] for i in range(1800)])
    case = (vectors[:900], vectors[900:], all_hashes[:900], all_hashes[900:])
    plain = mine_hard_negatives(*case, negatives_from=negatives_from, screen=False)
    screened = mine_hard_negatives(
        *case, negatives_from=negatives_from, screen=True, chunk_rows=128
    )
    approximate = mine_hard_negatives(*case, negatives_from=negatives_from, dtype=torch.bfloat16)
    _check_against_brute_force(*case, screened, negatives_from == "opposite")
    agree = (screened.for_source == plain.for_source).float().mean()
    assert agree > 0.99  # the rest are float32 ties within 1e-6, accepted by the check above
    # plain bfloat16 products really do pick other negatives in this case
    assert (approximate.for_source != plain.for_source).float().mean() > 0.05


def test_bfloat16_error_window_bounds_the_real_error():
    rng = np.random.default_rng(4)
    a = torch.nn.functional.normalize(torch.from_numpy(rng.normal(size=(200, 1024))).float(), dim=1)
    b = torch.nn.functional.normalize(torch.from_numpy(rng.normal(size=(300, 1024))).float(), dim=1)
    window = _bf16_window([a, b])
    error = ((a.bfloat16() @ b.bfloat16().t()).double() - a.double() @ b.double().t()).abs()
    assert error.max() < window / 2
    assert window < 0.03  # tight enough to leave few candidates


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


@pytest.mark.parametrize("transposed", [False, True])
@pytest.mark.parametrize("shape", [(37, 300), (64, 128), (5, 63)])
def test_screen_marks_are_every_value_at_or_above_the_threshold(shape, transposed):
    # the grouped int16 comparison (positive thresholds) and the plain one (any threshold), on
    # blocks and on transposed blocks, widths with and without a remainder group
    rng = np.random.default_rng(5)
    block = torch.from_numpy(rng.normal(size=shape).astype(np.float32)).bfloat16()
    block[0, :] = float("-inf")  # an excluded row
    view = block.t() if transposed else block
    for low, high in [(0.5, 2.0), (-2.0, 0.5)]:  # all positive; some negative or zero
        threshold = torch.from_numpy(rng.uniform(low, high, size=len(view))).bfloat16()
        rows, columns = _at_least(view, threshold)
        got = sorted(zip(rows.tolist(), columns.tolist(), strict=True))
        expected = (view.float() >= threshold.float().unsqueeze(1)).nonzero().tolist()
        assert got == [tuple(p) for p in expected]


@pytest.mark.parametrize("negatives_from", ["opposite", "any"])
def test_screening_with_no_positive_similarity(negatives_from):
    # anchors whose every candidate points away from them: the screen's int16 shortcuts assume
    # positive maxima and thresholds, these rows take the plain bfloat16 path
    rng = np.random.default_rng(6)
    source = torch.from_numpy(np.abs(rng.normal(size=(200, 16))).astype(np.float32))
    target = -torch.from_numpy(np.abs(rng.normal(size=(200, 16))).astype(np.float32))
    target[:50] *= -1  # some positive similarities too
    all_hashes = hashes([[i] for i in range(400)])
    case = (source, target, all_hashes[:200], all_hashes[200:])
    for chunk_rows in (64, 1000):
        screened = mine_hard_negatives(
            *case, negatives_from=negatives_from, screen=True, chunk_rows=chunk_rows
        )
        _check_against_brute_force(*case, screened, negatives_from == "opposite")
