"""Ratio-margin bitext mining: search, margin formula, modes, blocks, files."""

from __future__ import annotations

import numpy as np
import pytest

from psp_core.bitext_mining import (
    margin_best,
    mine,
    mine_files,
    nearest_neighbours,
    neighbourhoods,
    resolve_backend,
    retrieve,
)


def unit(array: np.ndarray) -> np.ndarray:
    return array / np.linalg.norm(array, axis=1, keepdims=True)


def hub_case(n: int = 6) -> tuple[np.ndarray, np.ndarray]:
    """Sources x_i = 0.8 e0 + 0.6 u_i, targets y_i = u_i plus a hub h = e0 (last target).

    cos(x_i, h) = 0.8 > cos(x_i, y_i) = 0.6, so cosine picks the hub for every source. With
    k = 2: r(x_i) = (0.8 + 0.6) / 2 = 0.7, r(h) = 0.8, r(y_i) = (0.6 + 0) / 2 = 0.3, so
    margin(x_i, h) = 0.8 / 0.75 = 1.067 < margin(x_i, y_i) = 0.6 / 0.5 = 1.2.
    """
    basis = np.eye(n + 1, dtype=np.float32)
    hub, directions = basis[0], basis[1:]
    sources = 0.8 * hub + 0.6 * directions
    targets = np.vstack([directions, hub[None]])
    return sources, targets


def test_cosine_picks_the_hub_and_margin_the_translation():
    sources, targets = hub_case()
    hub = len(targets) - 1
    assert (retrieve(sources, targets, method="cosine") == hub).all()
    assert (retrieve(sources, targets, method="margin", k=2) == np.arange(6)).all()
    hoods = neighbourhoods(sources, targets, 2)
    _, scores = margin_best(hoods, "forward")
    np.testing.assert_allclose(scores, 0.6 / ((0.7 + 0.3) / 2), rtol=1e-5)


def test_margin_scores_match_the_formula_written_out():
    rng = np.random.default_rng(0)
    source = rng.normal(size=(40, 8)).astype(np.float32)
    target = (source[rng.permutation(40)] + rng.normal(scale=0.8, size=(40, 8))).astype(np.float32)
    k = 3
    cos = unit(source) @ unit(target).T
    knn_src = np.sort(cos, axis=1)[:, ::-1][:, :k]  # each source's k nearest targets
    knn_tgt = np.sort(cos, axis=0)[::-1, :][:k, :].T  # each target's k nearest sources
    margin = cos / (knn_src.sum(1, keepdims=True) / (2 * k) + knn_tgt.sum(1)[None, :] / (2 * k))
    candidates = np.argsort(-cos, axis=1)[:, :k]
    best = candidates[np.arange(40), np.argmax(np.take_along_axis(margin, candidates, 1), 1)]

    forward = mine(source, target, k=k, mode="forward", backend="torch")
    order = np.argsort(forward.source_indices)
    np.testing.assert_array_equal(forward.target_indices[order], best)
    np.testing.assert_allclose(forward.scores[order], margin[np.arange(40), best], rtol=1e-5)
    assert np.all(np.diff(forward.scores) <= 0)  # sorted by score


def test_nearest_neighbours_match_brute_force():
    rng = np.random.default_rng(1)
    queries = rng.normal(size=(57, 12)).astype(np.float32)
    keys = rng.normal(size=(91, 12)).astype(np.float32) * 3.0  # scale must not matter
    similarities, indices = nearest_neighbours(queries, keys, 5, backend="torch")
    cos = unit(queries) @ unit(keys).T
    np.testing.assert_array_equal(indices, np.argsort(-cos, axis=1)[:, :5])
    np.testing.assert_allclose(similarities, -np.sort(-cos, axis=1)[:, :5], atol=1e-5)


@pytest.mark.parametrize("block_size", [1, 7, 64, 10_000])
def test_blocked_search_and_mining_equal_unblocked(block_size):
    rng = np.random.default_rng(2)
    rows = 150 if block_size > 1 else 40  # (blocks of one row: a search per pair of rows)
    paired = rows * 2 // 3
    source = rng.normal(size=(rows, 16)).astype(np.float32)
    target = np.vstack(
        [
            source[:paired] + rng.normal(scale=0.7, size=(paired, 16)),
            rng.normal(size=(rows // 5, 16)),
        ]
    )
    target = target.astype(np.float32)
    whole = nearest_neighbours(source, target, 4, block_size=100_000, backend="torch")
    blocked = nearest_neighbours(source, target, 4, block_size=block_size, backend="torch")
    np.testing.assert_array_equal(blocked[1], whole[1])
    np.testing.assert_allclose(blocked[0], whole[0], atol=1e-6)
    for mode in ("forward", "backward", "intersection"):
        a = mine(source, target, mode=mode, block_size=100_000, backend="torch")
        b = mine(source, target, mode=mode, block_size=block_size, backend="torch")
        np.testing.assert_array_equal(a.source_indices, b.source_indices)
        np.testing.assert_array_equal(a.target_indices, b.target_indices)
        np.testing.assert_allclose(a.scores, b.scores, rtol=1e-6)


def test_modes_and_threshold():
    sources, targets = hub_case()
    forward = mine(sources, targets, k=2, mode="forward")
    backward = mine(sources, targets, k=2, mode="backward")
    both = mine(sources, targets, k=2, mode="intersection")
    assert len(forward) == 6 and len(backward) == 7  # one per source / per target (hub too)
    assert sorted(zip(both.source_indices, both.target_indices, strict=True)) == [
        (i, i) for i in range(6)
    ]
    assert 6 in backward.target_indices.tolist()  # the hub finds some source backward...
    assert 6 not in both.target_indices.tolist()  # ...but no source picks it forward
    assert len(mine(sources, targets, k=2, mode="forward", threshold=1.1)) == 6
    assert len(mine(sources, targets, k=2, mode="forward", threshold=1.3)) == 0


def test_empty_sentences_are_never_mined():
    rng = np.random.default_rng(3)
    source = rng.normal(size=(20, 8)).astype(np.float32)
    target = source.copy()
    source[4] = 0.0
    target[[2, 9]] = 0.0
    for mode in ("forward", "backward", "intersection"):
        pairs = mine(source, target, k=3, mode=mode)
        assert 4 not in pairs.source_indices.tolist()
        assert not {2, 9} & set(pairs.target_indices.tolist())
        assert np.isfinite(pairs.scores).all()
    _, indices = nearest_neighbours(source, target, 3)
    assert not np.isin(indices, [2, 9]).any()


def test_bad_arguments_are_clear_errors():
    x = np.zeros((3, 4), dtype=np.float32)
    with pytest.raises(ValueError, match="unknown mining mode"):
        mine(x, x, mode="union")
    with pytest.raises(ValueError, match="same width"):
        nearest_neighbours(x, np.zeros((3, 5)), 1)
    with pytest.raises(ValueError, match="k must be >= 1"):
        nearest_neighbours(x, x, 0)
    with pytest.raises(ValueError, match="unknown search backend"):
        resolve_backend("annoy")


def test_faiss_backend_is_optional():
    try:
        import faiss  # noqa: F401
    except ImportError:
        with pytest.raises(ValueError, match="pip install faiss-cpu"):
            resolve_backend("faiss")
        assert resolve_backend("auto") == "torch"
    else:
        rng = np.random.default_rng(4)
        x, y = rng.normal(size=(2, 50, 8)).astype(np.float32)
        a = nearest_neighbours(x, y, 3, backend="faiss")
        b = nearest_neighbours(x, y, 3, backend="torch")
        np.testing.assert_array_equal(a[1], b[1])


# --- files -----------------------------------------------------------------------------------------


def test_mine_files_recovers_a_shuffled_copy(tmp_path, model, toy):
    sentences = [a for a, _ in toy.pairs(60, seed=21)]
    sentences = list(dict.fromkeys(sentences))  # unique
    rng = np.random.default_rng(5)
    targets = [sentences[i] for i in rng.permutation(len(sentences))]
    targets += [b for _, b in toy.pairs(10, seed=22)]  # distractors in the other "language"
    sources = sentences[:10] + ["", "with\ta tab"] + sentences[10:]
    targets.insert(3, "with\ta tab")
    (tmp_path / "a.txt").write_text("\n".join(sources) + "\n", encoding="utf-8")
    (tmp_path / "b.txt").write_text("\r\n".join(targets), encoding="utf-8")
    output = tmp_path / "out" / "mined.tsv"

    report = mine_files(model, tmp_path / "a.txt", tmp_path / "b.txt", output, block_size=16)

    rows = [line.split("\t") for line in output.read_text(encoding="utf-8").splitlines()]
    assert all(len(row) == 3 for row in rows)
    assert report.pairs_written == len(rows) == len(sentences) + 1
    assert report.source_sentences == len(sources) and report.target_sentences == len(targets)
    assert all(src == tgt for _, src, tgt in rows)
    assert ["with a tab", "with a tab"] in [row[1:] for row in rows]
    scores = [float(score) for score, _, _ in rows]
    assert scores == sorted(scores, reverse=True)
    expected = mine(model.embed(sources, normalize=True), model.embed(targets, normalize=True))
    np.testing.assert_allclose(scores, expected.scores, atol=1e-5)
    assert [p.name for p in output.parent.iterdir()] == ["mined.tsv"]  # no work files left


def test_mine_files_with_an_empty_file_writes_an_empty_output(tmp_path, model):
    (tmp_path / "a.txt").write_text("one sentence\n")
    (tmp_path / "b.txt").write_text("")
    report = mine_files(model, tmp_path / "a.txt", tmp_path / "b.txt", tmp_path / "o.tsv")
    assert report.pairs_written == 0 and (tmp_path / "o.tsv").read_text() == ""
    for mode in ("forward", "backward", "intersection"):
        assert len(mine(np.ones((3, 4)), np.ones((0, 4)), mode=mode)) == 0


def test_mine_files_names_a_missing_file(tmp_path, model):
    (tmp_path / "a.txt").write_text("x\n")
    with pytest.raises(FileNotFoundError, match="b.txt"):
        mine_files(model, tmp_path / "a.txt", tmp_path / "b.txt", tmp_path / "o.tsv")
