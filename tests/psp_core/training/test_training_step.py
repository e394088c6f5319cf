"""One training step on hand-built mega-batches whose hardest negatives are known.

Every sentence is one piece, so its embedding is one row of the table, and the rows are built
from a table of cosines (the Cholesky factor of their Gram matrix, rescaled so that only
cosines can matter). Which candidate is each anchor's hardest negative is therefore decided by
construction; a brute-force oracle re-derives it from first principles (every allowed
candidate's cosine, the largest wins) and computes the loss (cosines, hinges, mean).

One call of :func:`train_megabatch`, the function the trainer runs per mega-batch, must give
every mini-batch the oracle's loss and move exactly the rows of that mini-batch and of its
negatives. The cases are built so that the wrong rules change both: for bitext every source's
most similar sentence is another source (mining from the wrong pool picks it) and a copy of
one partner is more similar than the true negative; for paraphrase data some hardest negatives
lie on the anchor's own side (mining the other side only misses them) and a copy of an anchor
is in the pool.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pytest
import torch

from psp_core import TrainConfig, load_model, train
from psp_core.tokenization.tokenizer import flatten_id_lists
from psp_core.training.data import PairBatch
from psp_core.training.encoder import MeanEmbeddingEncoder
from psp_core.training.optim import build_optimizer
from psp_core.training.steps import PhaseTimes, StepSettings, train_megabatch
from psp_core.training.training_file import TrainingFileWriter

MARGIN = 0.4
UNUSED_ROWS = 2  # table rows no sentence uses: no step may move them


@dataclass(frozen=True)
class Case:
    """A mega-batch of named sentences, one piece each (a copy shares its original's piece).

    ``cosines`` between sentences' embeddings (0 where not listed; a copy has its original's);
    ``expected`` is every anchor's hardest negative by construction (or a copy of it).
    """

    pairs: list[tuple[str, str]]
    pieces: dict[str, int]
    cosines: dict[tuple[str, str], float]
    negatives_from: str
    expected: dict[str, str]

    @property
    def sources(self) -> list[str]:
        return [s for s, _ in self.pairs]

    @property
    def targets(self) -> list[str]:
        return [t for _, t in self.pairs]

    def partner(self, name: str) -> str:
        return dict(self.pairs + [(t, s) for s, t in self.pairs])[name]

    def mega_batch(self, first_piece: int = 0) -> PairBatch:
        def side(names):
            return flatten_id_lists([[first_piece + self.pieces[n]] for n in names])

        return PairBatch(side(self.sources), side(self.targets))


# fmt: off
BITEXT = Case(
    pairs=[("s0", "t0"), ("s1", "t1"), ("s2", "t2"), ("s3", "t3")],
    pieces={"s0": 0, "s1": 1, "s2": 2, "s3": 3, "t0": 4, "t1": 5, "t2": 6, "t3": 4},  # t3 = t0
    cosines={
        # the pairs (pair 3's target is a copy of t0)
        ("s0", "t0"): 0.25, ("s1", "t1"): 0.25, ("s2", "t2"): 0.25, ("s3", "t0"): 0.1,
        # each source's most similar sentence is a source: the wrong pool's pick
        ("s0", "s2"): 0.4, ("s1", "s3"): 0.35,
        # s0's hardest target is t2, since t3 (0.25: a copy of its partner t0) is excluded
        ("s0", "t2"): 0.15, ("s0", "t1"): 0.05,
        ("s1", "t2"): 0.18,
        ("s2", "t1"): 0.32, ("s2", "t0"): 0.28,
        # s3's hardest target is t1, since t0 (0.1: a copy of its partner t3) is excluded
        ("s3", "t1"): 0.08, ("s3", "t2"): 0.05,
    },
    negatives_from="opposite",
    expected={
        "s0": "t2", "s1": "t2", "s2": "t1", "s3": "t1",
        "t0": "s2", "t1": "s2", "t2": "s1", "t3": "s2",
    },
)

PARAPHRASE = Case(
    pairs=[("s0", "t0"), ("s1", "t1"), ("s2", "t2"), ("s3", "t3")],
    pieces={"s0": 0, "s1": 1, "s2": 0, "s3": 2, "t0": 3, "t1": 4, "t2": 5, "t3": 4},  # copies
    cosines={
        # the pairs (s2 is a copy of s0, t3 one of t1)
        ("s0", "t0"): 0.25, ("s1", "t1"): 0.25, ("s0", "t2"): 0.15, ("s3", "t1"): 0.2,
        # hardest negatives on the anchor's own side: s0 <-> s1 and t1 <-> t2
        ("s0", "s1"): 0.35, ("t1", "t2"): 0.32,
        # on the other side: s3 <-> t0 (for t0 it beats s2 = 0.25, a copy of its partner)
        ("s3", "t0"): 0.22,
        ("s1", "s3"): 0.1, ("s0", "t1"): 0.05,
    },
    negatives_from="any",
    # s0's own copy s2 (cosine 1) is never its negative
    expected={
        "s0": "s1", "s1": "s0", "s2": "s1", "s3": "t0",
        "t0": "s3", "t1": "t2", "t2": "t1", "t3": "t2",
    },
)
# fmt: on
CASES = {"bitext": BITEXT, "paraphrase": PARAPHRASE}


def hand_built_table(case: Case) -> np.ndarray:
    """Rows whose cosines are ``case.cosines`` (by piece), then ``UNUSED_ROWS`` rows."""
    n = max(case.pieces.values()) + 1
    gram = np.eye(n)
    for (a, b), cosine in case.cosines.items():
        p, q = case.pieces[a], case.pieces[b]
        gram[p, q] = gram[q, p] = cosine
    rows = np.linalg.cholesky(gram)  # unit rows with these inner products
    rows *= np.linspace(0.5, 3.0, n)[:, None]  # norms differ: only the cosines may matter
    return np.vstack([rows, np.linspace(-1.0, 1.0, UNUSED_ROWS * n).reshape(UNUSED_ROWS, n)])


def embedding(case: Case, table: np.ndarray, name: str, first_piece: int = 0) -> np.ndarray:
    return np.asarray(table[first_piece + case.pieces[name]], dtype=np.float64)


def cosine(u: np.ndarray, v: np.ndarray) -> float:
    return float(u @ v / (np.linalg.norm(u) * np.linalg.norm(v)))


def oracle_negatives(
    case: Case, table: np.ndarray, rule: str, *, exclude_copies: bool = True, first_piece: int = 0
) -> dict[str, str]:
    """Brute force: each anchor's most similar allowed candidate under ``rule``.

    ``"opposite"``: candidates from the other side; ``"any"``: from both sides; ``"same"``
    (wrong for both kinds): from the anchor's own side. The anchor and its partner, and any
    sentence with the same pieces as either, are not allowed.
    """
    negatives = {}
    for anchor in case.sources + case.targets:
        own, other = (
            (case.sources, case.targets) if anchor in case.sources else (case.targets, case.sources)
        )
        pool = {"opposite": other, "any": own + other, "same": own}[rule]
        partner = case.partner(anchor)
        excluded = {case.pieces[anchor], case.pieces[partner]} if exclude_copies else set()
        allowed = [c for c in pool if c not in (anchor, partner) and case.pieces[c] not in excluded]
        negatives[anchor] = max(
            allowed,
            key=lambda c: cosine(
                embedding(case, table, anchor, first_piece), embedding(case, table, c, first_piece)
            ),
        )
    return negatives


def oracle_loss(
    case: Case,
    table: np.ndarray,
    pairs: list[tuple[str, str]],
    negatives: dict[str, str],
    first_piece: int = 0,
) -> float:
    """The mean over ``pairs`` of the two hinges, from the embeddings in ``table``."""

    def cos(a, b):
        return cosine(
            embedding(case, table, a, first_piece), embedding(case, table, b, first_piece)
        )

    terms = [
        max(0.0, MARGIN - cos(s, t) + cos(s, negatives[s]))
        + max(0.0, MARGIN - cos(s, t) + cos(t, negatives[t]))
        for s, t in pairs
    ]
    return float(np.mean(terms))


def same_sentence(case: Case, a: str, b: str) -> bool:
    return case.pieces[a] == case.pieces[b]


@pytest.mark.parametrize("kind", CASES)
def test_the_hand_built_cases_are_what_they_claim(kind):
    """The construction itself: the oracle finds the negatives the case names, every hinge is
    active (so every negative's row gets a gradient), and each wrong rule changes the loss."""
    case = CASES[kind]
    table = hand_built_table(case)
    for (a, b), expected in case.cosines.items():
        assert cosine(embedding(case, table, a), embedding(case, table, b)) == pytest.approx(
            expected
        )
    negatives = oracle_negatives(case, table, case.negatives_from)
    assert all(same_sentence(case, negatives[a], case.expected[a]) for a in negatives), negatives
    for s, t in case.pairs:
        positive = cosine(embedding(case, table, s), embedding(case, table, t))
        for anchor in (s, t):
            hardest = cosine(
                embedding(case, table, anchor), embedding(case, table, negatives[anchor])
            )
            # active, with room to spare
            assert hardest > positive - MARGIN + 0.04, (anchor, negatives[anchor])
    right = oracle_loss(case, table, case.pairs, negatives)
    wrong_rules = [dict(rule="same"), dict(rule=case.negatives_from, exclude_copies=False)]
    wrong_rules.append(dict(rule="opposite" if case.negatives_from == "any" else "any"))
    for wrong in wrong_rules:
        wrong_loss = oracle_loss(case, table, case.pairs, oracle_negatives(case, table, **wrong))
        assert abs(wrong_loss - right) > 0.02, wrong
    if case is BITEXT:
        # every source's most similar sentence is a source, and s0's hardest target is t2
        # only because t3 (a copy of its partner) is excluded
        for s in case.sources:
            everything = oracle_negatives(case, table, "any")[s]
            assert everything in case.sources, (s, everything)
        copies_allowed = oracle_negatives(case, table, "opposite", exclude_copies=False)
        assert (copies_allowed["s0"], copies_allowed["s3"]) == ("t3", "t0")
    else:
        assert {negatives[a] for a in ("s0", "t1")} == {"s1", "t2"}  # own side
        copies_allowed = oracle_negatives(case, table, "any", exclude_copies=False)
        assert (copies_allowed["s0"], copies_allowed["t0"]) == ("s2", "s2")


@dataclass(frozen=True)
class Variant:
    """How the step is set up: the mining settings (as the trainer passes them) and optimizer."""

    screen: bool | None = None  # None: the trainer's default for mining_dtype="float32"
    chunk_rows: int = 512
    optimizer: str = "sparse"


VARIANTS = {
    "float32-default": Variant(),
    "float32-plain": Variant(screen=False),
    "float32-plain-chunked": Variant(screen=False, chunk_rows=3),
    # what the default does on large mega-batches where bfloat16 is fast
    "float32-screened-chunked": Variant(screen=True, chunk_rows=3),
    "dense-adam": Variant(optimizer="dense"),
}


def changed_rows(before: torch.Tensor, after: torch.Tensor) -> set[int]:
    return set(torch.nonzero((before != after).any(dim=1)).flatten().tolist())


@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("kind", CASES)
def test_one_mega_batch_uses_the_known_hardest_negatives(kind, variant):
    case, variant = CASES[kind], VARIANTS[variant]
    table = hand_built_table(case)
    model = MeanEmbeddingEncoder(*table.shape, sparse=variant.optimizer == "sparse")
    with torch.no_grad():
        model.weight.copy_(torch.from_numpy(table))
    optimizer = build_optimizer(model, variant.optimizer, lr=0.01)
    settings = StepSettings(
        batch_size=2,
        margin=MARGIN,
        grad_clip=5.0,
        negatives_from=case.negatives_from,
        mining_chunk_rows=variant.chunk_rows,
        mining_screen=variant.screen,
        device=torch.device("cpu"),
    )
    weights = [model.weight.detach().clone()]

    def keep_weights(step, loss):
        weights.append(model.weight.detach().clone())

    times = PhaseTimes()  # timed (benchmarks/train_profile.py): the same steps
    losses = train_megabatch(
        model, optimizer, case.mega_batch(), settings, first_step=0, on_step=keep_weights,
        times=times,
    )  # fmt: skip
    phases = {"encode", "hashes", "mine", "assemble", "forward", "backward", "optimizer"}
    assert set(times.seconds) == phases and all(v > 0 for v in times.seconds.values())

    negatives = oracle_negatives(case, table, case.negatives_from)  # mined once, from the start
    mini_batches = [case.pairs[:2], case.pairs[2:]]
    assert len(losses) == len(mini_batches)
    for step, pairs in enumerate(mini_batches):
        # the loss of each step is the oracle's for these negatives, with the weights as they
        # were before that step
        expected = oracle_loss(case, weights[step].double().numpy(), pairs, negatives)
        assert losses[step] == pytest.approx(expected, rel=1e-5), f"loss of mini-batch {step}"
        if variant.optimizer == "dense" and step > 0:
            continue  # dense Adam's momentum moves the rows of earlier steps too
        # the step moved the rows of its pairs and of their negatives, and only those
        used = {case.pieces[name] for pair in pairs for name in pair}
        used |= {case.pieces[negatives[name]] for pair in pairs for name in pair}
        assert changed_rows(weights[step], weights[step + 1]) == used, f"rows of step {step}"


def write_pairs(path, case: Case, tokenizer, kind: str, first_piece: int):
    mega = case.mega_batch(first_piece)
    with TrainingFileWriter(
        path, vocab_size=tokenizer.vocab_size, spm_sha256=tokenizer.sha256, lang="xx", kind=kind
    ) as writer:
        writer.append(mega.source, mega.target)
    return path


@pytest.mark.parametrize("kind", CASES)
def test_train_mines_as_the_training_files_kind_says(tmp_path, tokenizer, spm_path, kind):
    """Through :func:`train`: the first step's loss is the oracle's for the file's kind (a
    trainer that mined a paraphrase file's negatives from the other side only, or a bitext
    file's from both sides, would differ). The table is train's own random initialisation,
    read from a run of zero steps."""
    case, first_piece = CASES[kind], 10
    path = write_pairs(tmp_path / "pairs.h5", case, tokenizer, kind, first_piece)
    config = dict(dim=4, batch_size=len(case.pairs), max_megabatch=1, epochs=1, log_every=0)
    untrained = train(path, spm_path, tmp_path / "m0", TrainConfig(**config, max_steps=0))
    table = load_model(untrained.bundle).weight.double().numpy()

    def loss_under(rule):
        negatives = oracle_negatives(case, table, rule, first_piece=first_piece)
        return oracle_loss(case, table, case.pairs, negatives, first_piece)

    other = "any" if case.negatives_from == "opposite" else "opposite"
    assert abs(loss_under(case.negatives_from) - loss_under(other)) > 0.02  # the case tells

    losses = []
    train(
        path,
        spm_path,
        tmp_path / "m1",
        TrainConfig(**config, max_steps=1),
        on_step=lambda step, loss: losses.append(loss),
    )
    assert losses == [pytest.approx(loss_under(case.negatives_from), rel=1e-5)]
