"""Mining from remembered candidates (TrainConfig.mining_candidates, issue 29 part 2): the lists,
their re-scoring, the sampled check that decides whether they may be used, and the trainer's use
of them (kept mega-batches, counters, resume, refusals)."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from psp_core import TrainConfig, load_model, train
from psp_core.cli.main import build_parser
from psp_core.training.candidate_memory import CandidateMemory
from psp_core.training.candidate_mining import (
    AGREEMENT,
    WITHIN,
    rescore,
    sampled_agreement,
    top_candidates,
)
from psp_core.training.checkpoint import CANDIDATES_FILE, CheckpointStore
from psp_core.training.negative_mining import mine_hard_negatives, sentence_hashes

RULES = ["opposite", "any"]


def hashes(id_lists):
    ids = np.concatenate([np.asarray(x, dtype=np.int32) for x in id_lists])
    offsets = np.concatenate([[0], np.cumsum([len(x) for x in id_lists])]).astype(np.int64)
    return torch.from_numpy(sentence_hashes(ids, offsets))


def random_case(n=300, dim=16, distinct=120, seed=0):
    """Embeddings where equal id sequences (drawn from ``distinct``) share a vector: copies of a
    partner that must never be chosen, and ties."""
    rng = np.random.default_rng(seed)
    ids = rng.integers(0, distinct, size=2 * n)
    vectors = torch.from_numpy(rng.normal(size=(distinct, dim)).astype(np.float32))[ids]
    all_hashes = hashes([[int(x)] for x in ids])
    return vectors[:n], vectors[n:], all_hashes[:n], all_hashes[n:]


def scores_of(case, rule):
    """Per side: every candidate's cosine, -inf where excluded (the brute-force oracle)."""
    source, target, source_hash, target_hash = case
    s = torch.nn.functional.normalize(source, dim=1)
    t = torch.nn.functional.normalize(target, dim=1)
    both, both_hash = torch.cat([s, t]), torch.cat([source_hash, target_hash])
    out = []
    for anchors, own, partner, pool, pool_hash in [
        (s, source_hash, target_hash, t if rule == "opposite" else both,
         target_hash if rule == "opposite" else both_hash),
        (t, target_hash, source_hash, s if rule == "opposite" else both,
         source_hash if rule == "opposite" else both_hash),
    ]:  # fmt: skip
        allowed = (pool_hash[None] != own[:, None]) & (pool_hash[None] != partner[:, None])
        out.append((anchors @ pool.t()).masked_fill(~allowed, float("-inf")))
    return out


def assert_exact(case, negatives, rule="opposite"):
    """``negatives`` are each anchor's hardest allowed candidate (copies tie: either one)."""
    for side_scores, chosen in zip(
        scores_of(case, rule), (negatives.for_source, negatives.for_target), strict=True
    ):
        best = side_scores.max(dim=1).values
        torch.testing.assert_close(side_scores.gather(1, chosen[:, None]).squeeze(1), best)


@pytest.mark.parametrize("rule", RULES)
@pytest.mark.parametrize("chunk_rows", [512, 37])
def test_top_candidates_are_the_k_best_allowed_and_the_first_is_exact_mining(rule, chunk_rows):
    case = random_case()
    k = 6
    lists = top_candidates(*case, negatives_from=rule, k=k, chunk_rows=chunk_rows)
    exact = mine_hard_negatives(*case, negatives_from=rule, screen=False)
    for side_scores, side_lists, side_exact in zip(
        scores_of(case, rule), lists, (exact.for_source, exact.for_target), strict=True
    ):
        assert side_lists.shape == (len(side_scores), k)
        chosen = side_scores.gather(1, side_lists)
        expected = side_scores.topk(k, dim=1).values
        # the k best allowed scores, best first (copies tie: either may be listed)
        torch.testing.assert_close(chosen, expected, atol=1e-6, rtol=0)
        assert not torch.isneginf(chosen).any()  # never an excluded candidate
        # the first is exact mining's negative (or a tie of it)
        exact_scores = side_scores.gather(1, side_exact[:, None]).squeeze(1)
        torch.testing.assert_close(chosen[:, 0], exact_scores, atol=1e-6, rtol=0)


def test_too_few_candidates_are_padded_with_minus_one():
    source = torch.tensor([[1.0, 0.0], [0.0, 1.0]])
    case = (source, source.flip(0), hashes([[1], [2]]), hashes([[3], [4]]))
    for_source, for_target = top_candidates(*case, k=4)
    # each source has one allowed target (the other pair's)
    assert for_source.tolist() == [[1, -1, -1, -1], [0, -1, -1, -1]]
    assert for_target.tolist() == [[1, -1, -1, -1], [0, -1, -1, -1]]
    chosen = rescore(*case, (for_source, for_target))
    assert chosen.for_source.tolist() == [1, 0]
    empty = torch.full((2, 4), -1)
    assert rescore(*case, (empty, empty)).for_source.tolist() == [-1, -1]


@pytest.mark.parametrize("rule", RULES)
def test_rescoring_lists_of_the_same_vectors_gives_exact_mining_and_the_sample_agrees(rule):
    case = random_case(seed=1)
    lists = top_candidates(*case, negatives_from=rule, k=4)
    assert_exact(case, rescore(*case, lists, negatives_from=rule), rule)
    check = sampled_agreement(
        *case, lists, negatives_from=rule, sample=64, generator=np.random.default_rng(0)
    )
    assert check.sampled == 128 and check.agreeing == 128 and check.agreement == 1.0
    for side_scores, rows, exact in zip(
        scores_of(case, rule), check.rows, check.exact, strict=True
    ):
        assert len(rows) == 64 and len(set(rows.tolist())) == 64
        best = side_scores[rows].max(dim=1).values
        torch.testing.assert_close(side_scores[rows].gather(1, exact[:, None]).squeeze(1), best)


@pytest.mark.parametrize("rule", RULES)
def test_lists_of_unrelated_vectors_fail_the_sampled_check(rule):
    old = random_case(seed=2)
    new = random_case(seed=3)
    new = (new[0], new[1], old[2], old[3])  # the same sentences, moved far
    lists = top_candidates(*old, negatives_from=rule, k=4)
    check = sampled_agreement(
        *new, lists, negatives_from=rule, sample=100, generator=np.random.default_rng(0)
    )
    assert check.agreement < 0.5
    # a small move keeps them (the agreement counts candidates within WITHIN of the best)
    moved = (old[0] * (1 + 1e-4), old[1], old[2], old[3])
    kept = sampled_agreement(
        *moved, lists, negatives_from=rule, sample=100, generator=np.random.default_rng(0)
    )
    assert kept.agreement >= AGREEMENT and WITHIN == 0.01


def test_memory_reuses_lists_while_the_sample_agrees_and_mines_again_otherwise(tmp_path):
    case = random_case(n=256, seed=4)
    slots, counters = {}, dict.fromkeys(("exact", "reused", "sampled", "agreeing", "failed"), 0)
    memory = CandidateMemory(
        tmp_path, k=4, slot_pairs=256, n_pairs=600, slots=slots, counters=counters, seed=1
    )
    assert (memory.slot_of(0, 256), memory.slot_of(256, 256), memory.slot_of(512, 88)) == (0, 1, 2)
    assert memory.slot_of(100, 256) is None and memory.slot_of(0, 128) is None  # annealed
    assert memory.order(0, 0, 256) is None
    assert sorted(memory.order(1, 3, 256).tolist()) == list(range(256))
    assert not np.array_equal(memory.order(1, 3, 256), memory.order(1, 4, 256))

    assert_exact(case, memory.miner(1, 0, "opposite", 512)(*case))
    assert slots == {"1": [0, 256]} and counters["exact"] == 1
    again = memory.miner(1, 1, "opposite", 512)(*case)  # the same vectors an epoch later
    assert counters["reused"] == 1 and counters["agreeing"] == counters["sampled"] == 256
    assert_exact(case, again)
    assert slots == {"1": [0, 256]}  # re-used lists keep their epoch

    moved = random_case(n=256, seed=5)
    moved = (moved[0], moved[1], case[2], case[3])
    third = memory.miner(1, 2, "opposite", 512)(*moved)
    assert counters["exact"] == 2 and counters["reused"] == 1 and counters["failed"] == 1
    assert counters["sampled"] == 256  # only the re-used lists' samples are counted
    assert slots == {"1": [2, 256]}
    assert_exact(moved, third)

    memory.flush()
    # a resumed run finds them; a damaged or missing file is started again
    again = CandidateMemory(
        tmp_path, k=4, slot_pairs=256, n_pairs=600, slots=slots, counters=counters, seed=1
    )
    assert slots == {"1": [2, 256]}
    np.asarray(again.lists)[256:300] = 10_000  # points outside the pool
    again.flush()
    before = counters["exact"]
    again.miner(1, 3, "opposite", 512)(*moved)
    assert counters["exact"] == before + 1
    np.asarray(again.lists)[256:260, 0, :2] = 7  # a candidate listed twice
    again.miner(1, 4, "opposite", 512)(*moved)
    assert counters["exact"] == before + 2
    (tmp_path / CANDIDATES_FILE).write_bytes(b"damaged")
    CandidateMemory(
        tmp_path, k=4, slot_pairs=256, n_pairs=600, slots=slots, counters=counters, seed=1
    )
    assert slots == {}


QUICK = dict(dim=32, batch_size=32, max_megabatch=4, anneal_every=0, log_every=0)


def test_training_reuses_remembered_candidates_after_the_first_epoch(
    tmp_path, toy_training_file, spm_path
):
    config = TrainConfig(**QUICK, epochs=3, lr=0.002, mining_candidates=8)
    result = train(toy_training_file, spm_path, tmp_path / "m", config)
    slots = -(-2000 // 128)
    mining = [record["mining"] for record in result.state.history]
    assert mining[0] == {"exact": slots, "failed": 0, "reused": 0, "sampled_agreement": None}
    assert all(m["exact"] + m["reused"] == slots for m in mining)
    assert mining[2]["reused"] > slots // 2, mining
    assert all(m["sampled_agreement"] >= AGREEMENT for m in mining[1:] if m["reused"]), mining
    assert not (tmp_path / "m.checkpoint").exists()  # the lists go with the checkpoint
    # the run learns like exact mining does: its last epoch's loss within 10%
    exact = train(
        toy_training_file, spm_path, tmp_path / "e", TrainConfig(**QUICK, epochs=3, lr=0.002)
    )
    assert "mining" not in exact.state.history[0]
    loss, exact_loss = result.state.history[-1]["loss"], exact.state.history[-1]["loss"]
    assert abs(loss - exact_loss) < 0.1 * exact_loss, (loss, exact_loss)


class Killed(Exception):
    pass


def test_killed_run_with_remembered_candidates_resumes_to_identical_weights(
    tmp_path, toy_training_file, spm_path
):
    config = TrainConfig(
        **QUICK, epochs=3, lr=0.002, mining_candidates=8, checkpoint_every=7,
    )  # fmt: skip
    reference = train(toy_training_file, spm_path, tmp_path / "ref", config)

    def kill_in_the_third_epoch(step, loss):
        if step == 150:
            raise Killed

    with pytest.raises(Killed):
        train(
            toy_training_file, spm_path, tmp_path / "run", config, on_step=kill_in_the_third_epoch
        )
    latest = CheckpointStore(tmp_path / "run.checkpoint").latest
    state = json.loads((latest / "state.json").read_text())["state"]
    assert state["epoch"] == 2 and state["candidate_slots"]
    assert (tmp_path / "run.checkpoint" / CANDIDATES_FILE).is_file()
    torch.manual_seed(12345)
    resumed = train(toy_training_file, spm_path, tmp_path / "run", config)
    assert torch.equal(load_model(resumed.bundle).weight, load_model(reference.bundle).weight)
    assert [r["mining"] for r in resumed.state.history] == [
        r["mining"] for r in reference.state.history
    ]


def test_mixed_files_are_refused(tmp_path, toy, tokenizer, spm_path):
    from psp_core.training.training_file import TrainingFileWriter

    pairs = toy.pairs(200)
    path = tmp_path / "mixed.h5"
    with TrainingFileWriter(
        path,
        vocab_size=tokenizer.vocab_size,
        spm_sha256=tokenizer.sha256,
        lang="multi",
        kind="bitext",
        groups=("de", "fr"),
        group_kinds=("bitext", "bitext"),
    ) as writer:
        writer.append(
            tokenizer.encode([s for s, _ in pairs]),
            tokenizer.encode([t for _, t in pairs]),
            np.zeros(200, dtype=np.int64),
        )
    with pytest.raises(ValueError, match="one-language training file"):
        train(path, spm_path, tmp_path / "m", TrainConfig(**QUICK, mining_candidates=4))


def test_cli_takes_the_new_settings():
    args = build_parser().parse_args(
        ["train", "--data", "d.h5", "--spm", "s.model", "--output", "o",
         "--mining-candidates", "16"]
    )  # fmt: skip
    assert args.mining_candidates == 16


def test_negative_settings_are_refused():
    with pytest.raises(ValueError, match="mining_candidates"):
        TrainConfig(mining_candidates=-1)
