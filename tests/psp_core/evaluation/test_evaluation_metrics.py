"""STS correlations, Tatoeba error rates, results tables and the suites on generated data.

Every metric is checked against an independent computation (scipy / numpy written out here).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from scipy import stats

from psp_core.evaluation import (
    STS17_TRACKS,
    STS_YEAR_DATASETS,
    Correlation,
    EvaluationResults,
    StsEvaluator,
    correlation,
    error_rate,
    evaluate_model,
    measure_speed,
    pearson,
    spearman,
    tatoeba_errors,
)
from psp_core.evaluation.suites.tatoeba import TatoebaScore

CASES = {
    "linear": ([1.0, 2.0, 3.0, 4.0, 5.0], [2.0, 4.1, 5.9, 8.2, 9.9]),
    "anti": ([1.0, 2.0, 3.0, 4.0], [4.0, 3.0, 1.0, 2.0]),
    "ties": ([1.0, 1.0, 2.0, 3.0, 3.0, 3.0], [0.5, 0.7, 0.7, 2.0, 1.0, 3.0]),
    "nonlinear": ([0.1, 0.2, 0.3, 0.9, 1.5], [1.0, 1.1, 1.3, 5.0, 50.0]),
    "random": tuple(np.random.default_rng(3).normal(size=(2, 40)).tolist()),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_pearson_and_spearman_match_scipy(case):
    x, y = map(np.asarray, CASES[case])
    assert pearson(x, y) == pytest.approx(stats.pearsonr(x, y)[0], abs=1e-12)
    assert spearman(x, y) == pytest.approx(stats.spearmanr(x, y)[0], abs=1e-12)
    result = correlation(x, y)
    assert result == Correlation(
        pytest.approx(100 * stats.pearsonr(x, y)[0]),
        pytest.approx(100 * stats.spearmanr(x, y)[0]),
        len(x),
    )


@pytest.mark.parametrize(
    "predicted", [[0.3, 0.3, 0.3, 0.3], [0.0, 0.0, 0.0, 0.0]], ids=["constant", "zeros"]
)
def test_constant_predictions_give_zero_not_nan(predicted):
    result = correlation(np.asarray(predicted), np.array([0.0, 1.0, 2.0, 5.0]))
    assert result.pearson == 0.0 and result.spearman == 0.0


def test_correlation_refuses_mismatched_lengths():
    with pytest.raises(ValueError, match="3 predictions for 2 gold"):
        correlation(np.zeros(3), np.zeros(2))


def test_mean_of_correlations_is_unweighted():
    mean = Correlation.mean([Correlation(10.0, 20.0, 5), Correlation(30.0, 60.0, 100)])
    assert (mean.pearson, mean.spearman, mean.n) == (20.0, 40.0, 105)


# --- Tatoeba ---------------------------------------------------------------------------------------


def test_error_rate_counts_misaligned_retrievals():
    assert error_rate(np.array([0, 1, 2, 3])) == 0.0
    assert error_rate(np.array([0, 0, 2, 2])) == 50.0
    assert error_rate(np.array([1, 2, 3, 0])) == 100.0


def test_identity_embeddings_give_zero_error():
    vectors = np.random.default_rng(0).normal(size=(200, 32)).astype(np.float32)
    score = tatoeba_errors(vectors, vectors.copy())
    assert score.as_dict() == pytest.approx(
        {
            "n": 200,
            "cosine_xx_en": 0.0,
            "cosine_en_xx": 0.0,
            "cosine_mean": 0.0,
            "margin_xx_en": 0.0,
            "margin_en_xx": 0.0,
            "margin_mean": 0.0,
        }
    )


def test_shuffled_embeddings_give_almost_full_error():
    rng = np.random.default_rng(1)
    vectors = rng.normal(size=(300, 32)).astype(np.float32)
    permutation = rng.permutation(300)
    score = tatoeba_errors(vectors, vectors[permutation])
    expected = 100.0 * np.mean(permutation != np.arange(300))  # fixed points stay correct
    assert expected > 98
    for value in (score.cosine_xx_en, score.cosine_en_xx, score.margin_xx_en, score.margin_en_xx):
        assert value == pytest.approx(expected)


def test_tatoeba_error_against_a_hand_computed_case():
    rng = np.random.default_rng(2)
    english = rng.normal(size=(50, 16)).astype(np.float32)
    other = english + rng.normal(scale=1.2, size=english.shape).astype(np.float32)
    unit = lambda a: a / np.linalg.norm(a, axis=1, keepdims=True)  # noqa: E731
    cos = unit(other) @ unit(english).T
    expected_xx_en = 100 * np.mean(cos.argmax(1) != np.arange(50))
    expected_en_xx = 100 * np.mean(cos.argmax(0) != np.arange(50))
    score = tatoeba_errors(other, english)
    assert 0 < expected_xx_en < 100
    assert score.cosine_xx_en == pytest.approx(expected_xx_en)
    assert score.cosine_en_xx == pytest.approx(expected_en_xx)
    assert score.cosine_mean == pytest.approx((expected_xx_en + expected_en_xx) / 2)


# --- suites on a generated evaluation directory ----------------------------------------------------


def write_sts(path: Path, rows: list[tuple[float, str, str]]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(f"{g}\t{a}\t{b}\n" for g, a, b in rows), encoding="utf-8")
    return path


@pytest.fixture()
def eval_dir(tmp_path, toy) -> Path:
    """STS 2012 with two of its datasets, STS 2013 with one, STS17 en-en and ar-en, STSB dev,
    Tatoeba for one language; everything else is missing."""
    pairs = toy.pairs(40, seed=11)
    rng = np.random.default_rng(5)

    def rows(seed):
        shuffled = [pairs[(i + seed) % len(pairs)][1] for i in range(len(pairs))]
        result = [(5.0, a, b) for a, b in pairs[:20]]
        result += [
            (float(rng.integers(0, 3)), a, b)
            for (a, _), b in zip(pairs[20:], shuffled[20:], strict=True)
        ]
        return result

    root = tmp_path / "eval"
    write_sts(root / "sts" / "2012" / "MSRpar.tsv", rows(1))
    write_sts(root / "sts" / "2012" / "MSRvid.tsv", rows(2))
    write_sts(root / "sts" / "2013" / "FNWN.tsv", rows(3))
    write_sts(root / "sts17" / "en-en.tsv", rows(4))
    write_sts(root / "sts17" / "ar-en.tsv", rows(5))
    write_sts(root / "stsb" / "dev.tsv", rows(6))
    (root / "tatoeba").mkdir()
    (root / "tatoeba" / "xyz-eng.xyz").write_text("\n".join(b for _, b in pairs) + "\n")
    (root / "tatoeba" / "xyz-eng.eng").write_text("\n".join(a for a, _ in pairs) + "\n")
    return root


def test_evaluate_model_matches_independent_computations(model, eval_dir):
    results = evaluate_model(model, eval_dir, ["sts", "sts17", "stsb", "tatoeba"])

    def expected(path):
        rows = [line.split("\t") for line in path.read_text().splitlines()]
        gold = np.array([float(r[0]) for r in rows])
        left = model.embed([r[1] for r in rows], normalize=True)
        right = model.embed([r[2] for r in rows], normalize=True)
        cos = (left * right).sum(1)
        return 100 * stats.pearsonr(cos, gold)[0], 100 * stats.spearmanr(cos, gold)[0]

    msrpar = results.sts["2012"]["MSRpar"]
    assert (msrpar.pearson, msrpar.spearman) == pytest.approx(
        expected(eval_dir / "sts/2012/MSRpar.tsv"), abs=1e-4
    )
    year_2012 = np.mean([expected(eval_dir / f"sts/2012/{n}.tsv")[0] for n in ("MSRpar", "MSRvid")])
    assert results.sts_years["2012"].pearson == pytest.approx(year_2012, abs=1e-4)
    year_2013 = expected(eval_dir / "sts/2013/FNWN.tsv")[0]
    assert results.sts_mean.pearson == pytest.approx((year_2012 + year_2013) / 2, abs=1e-4)
    assert results.sts17["ar-en"].pearson == pytest.approx(
        expected(eval_dir / "sts17/ar-en.tsv")[0], abs=1e-4
    )
    assert set(results.stsb) == {"dev"}
    assert set(results.tatoeba) == {"xyz"}
    # StsEvaluator (training's dev_evaluator) agrees with the suite
    assert StsEvaluator(eval_dir / "sts17/en-en.tsv")(model) == pytest.approx(
        results.sts17["en-en"].pearson
    )


def test_missing_datasets_are_named_and_logged(model, eval_dir, caplog):
    results = evaluate_model(model, eval_dir, ["sts", "sts17", "stsb", "tatoeba"])
    expected_missing = {f"STS 2012 {n}" for n in ("OnWN", "SMTeuroparl", "SMTnews")}
    expected_missing |= {"STS 2013 OnWN", "STS 2013 headlines"}
    expected_missing |= {
        f"STS {y} {n}" for y in ("2014", "2015", "2016") for n in STS_YEAR_DATASETS[y]
    }
    expected_missing |= {
        f"STS17 {t.name}" for t in STS17_TRACKS if t.name not in ("en-en", "ar-en")
    }
    expected_missing |= {"STSB test"}  # (train is training data: not evaluated)
    expected_missing |= {f"Tatoeba {lang}" for lang in ("ara", "deu", "spa", "fra", "rus", "tur")}
    assert set(results.missing) == expected_missing
    assert len(results.missing) == len(expected_missing)
    assert "STS 2015" in caplog.text and "tatoeba/deu-eng" in caplog.text
    assert set(results.sts) == {"2012", "2013"}


def test_results_render_to_markdown_and_json(model, eval_dir):
    results = evaluate_model(model, eval_dir, ["sts", "sts17", "tatoeba"], model_name="toy")
    text = results.to_markdown()
    assert "| **2012 mean** [1] |" in text and "| 68.7 |" in text  # paper's 2012 beside ours
    assert "| **STS 2012-2016 mean, over 2012-2013** [3] |" in text
    assert "| 74.6 (2012-2016) |" in text
    assert "| ar-en | en, ar |" in text and "| 78.3 |" in text
    assert "| xyz | 40 |" in text
    assert "Missing (skipped): " in text and "STS 2015 belief" in text
    data = json.loads(json.dumps(results.to_dict()))
    assert data["model"] == "toy"
    assert data["sts"]["mean_over_years"] == ["2012", "2013"]
    assert data["sts"]["years"]["2012"]["pearson"] == pytest.approx(
        results.sts_years["2012"].pearson
    )
    assert data["sts17"]["en-en"]["n"] == 40
    assert data["tatoeba"]["xyz"]["cosine_mean"] == pytest.approx(
        results.tatoeba["xyz"].cosine_mean
    )
    assert data["paper"]["tatoeba"]["ara"] == 8.8
    assert "STS17 es-es" in data["missing"]


def test_markdown_of_hand_made_results():
    results = EvaluationResults(
        sts={"2014": {"images": Correlation(80.0, 79.0, 750)}},
        tatoeba={"deu": TatoebaScore(1000, 2.0, 3.0, 1.0, 1.5)},
    )
    text = results.to_markdown()
    assert "| **2014 mean** [1] | 750 | **80.0** | **79.0** | 78.1 |" in text
    assert (
        "[1] 2014 mean 80.0 without OnWN, deft-forum, deft-news, headlines and tweet-news" in text
    )
    assert "| deu | 1000 | 2.0 | 3.0 | **2.5** | 1.0 | 1.5 | **1.2** | 1.5 |" in text


def test_speed_counts_sentences(model, toy):
    sentences = [s for pair in toy.pairs(100, seed=2) for s in pair]
    speed = measure_speed(model, sentences, repeats=1)
    assert speed.sentences == 200 and speed.batch_size == 64
    assert speed.with_tokenization > 0 and speed.without_tokenization > 0
    assert "with tokenization" in EvaluationResults(speed=speed).to_markdown()


def test_unknown_suite_and_missing_directory_are_clear_errors(model, tmp_path):
    with pytest.raises(ValueError, match="unknown evaluation suites"):
        evaluate_model(model, tmp_path, ["sts", "glue"])
    with pytest.raises(FileNotFoundError, match="does not exist"):
        evaluate_model(model, tmp_path / "nope", ["sts"])
