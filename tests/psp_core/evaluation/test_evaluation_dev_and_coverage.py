"""Honest evaluation output: the dev set (the STS file the model was selected on) is marked and
left out of every mean, and a mean over less than the paper's says what is missing beside the
paper's number. Generated evaluation directories in tmp_path, the random toy model."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from psp_core.evaluation import STS_YEAR_DATASETS, EvaluationResults, evaluate_model
from psp_core.evaluation.coverage import sts_coverage
from psp_core.evaluation.registry import dev_dataset
from psp_core.evaluation.sts import Correlation
from psp_core.evaluation.suite import DevDataset


def write_sts(path: Path, pairs: list[tuple[str, str]], seed: int) -> Path:
    """Aligned pairs with gold 5 and shuffled ones with gold 0-2 (distinct per ``seed``)."""
    rng = np.random.default_rng(seed)
    half = len(pairs) // 2
    lines = [f"5.0\t{a}\t{b}" for a, b in pairs[:half]]
    shuffled = rng.permutation(len(pairs))
    lines += [
        f"{rng.integers(0, 3)}.0\t{pairs[i][0]}\t{pairs[shuffled[i]][1]}"
        for i in range(half, len(pairs))
    ]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def eval_dir_with(root: Path, toy, files: list[str]) -> Path:
    pairs = toy.pairs(40, seed=21)
    for seed, relative in enumerate(files):
        write_sts(root / relative, pairs, seed)
    return root


@pytest.fixture()
def small_eval_dir(tmp_path, toy) -> Path:
    """STS 2012 MSRpar + MSRvid, STS 2014 OnWN, STS 2017 en-en and es-en."""
    files = ["sts/2012/MSRpar.tsv", "sts/2012/MSRvid.tsv", "sts/2014/OnWN.tsv"]
    return eval_dir_with(tmp_path / "eval", toy, files + ["sts17/en-en.tsv", "sts17/es-en.tsv"])


@pytest.fixture()
def partial_eval_dir(tmp_path, toy) -> Path:
    """Every public STS 2012-2014 dataset but 2014's tweet-news; no 2015, 2016 (as in
    ../shared/data/eval, which also lacks 2013's SMT)."""
    files = [
        f"sts/{year}/{name}.tsv"
        for year in ("2012", "2013", "2014")
        for name in STS_YEAR_DATASETS[year]
        if name != "tweet-news"
    ]
    return eval_dir_with(tmp_path / "eval", toy, files)


def test_the_dev_track_is_marked_in_json_and_markdown(model, small_eval_dir):
    results = evaluate_model(model, small_eval_dir, ["sts", "sts17"], dev_sts="sts17/en-en.tsv")
    data = json.loads(json.dumps(results.to_dict()))
    assert data["dev_sts"] == "sts17/en-en.tsv" and data["dev_unnamed"] is False
    assert data["sts17"]["en-en"]["dev"] is True and data["sts17"]["es-en"]["dev"] is False
    assert not any(d["dev"] for sets in data["sts"]["datasets"].values() for d in sets.values())
    text = results.to_markdown()
    assert "| en-en (dev) | en, en | 40 |" in text and "| es-en | es, en | 40 |" in text
    assert "(dev): sts17/en-en.tsv, the STS file the model was selected on" in text


def test_a_dev_set_among_the_sts_years_is_left_out_of_the_means(model, small_eval_dir):
    results = evaluate_model(model, small_eval_dir, ["sts"], dev_sts="sts/2012/MSRpar.tsv")
    msrvid, onwn = results.sts["2012"]["MSRvid"], results.sts["2014"]["OnWN"]
    assert results.sts["2012"]["MSRpar"].pearson != msrvid.pearson  # it was evaluated
    assert results.sts_years["2012"] == Correlation.mean([msrvid])
    assert results.sts_mean == Correlation.mean([msrvid, onwn])

    data = json.loads(json.dumps(results.to_dict()))
    assert data["sts"]["datasets"]["2012"]["MSRpar"]["dev"] is True
    assert data["sts"]["years"]["2012"]["pearson"] == pytest.approx(msrvid.pearson)
    assert data["sts"]["years"]["2012"]["n"] == 40
    assert data["sts"]["mean"]["pearson"] == pytest.approx((msrvid.pearson + onwn.pearson) / 2)
    assert "MSRpar" in data["sts"]["datasets_absent"]["2012"]
    assert (
        "2012 without OnWN, SMTeuroparl, SMTnews and the dev set MSRpar"
        in (data["sts"]["mean_note"])
    )

    text = results.to_markdown()
    assert "| 2012 MSRpar (dev) | 40 |" in text
    assert f"| **2012 mean** [1] | 40 | **{msrvid.pearson:.1f}** |" in text
    mean = (msrvid.pearson + onwn.pearson) / 2
    assert f"| **STS 2012-2016 mean, over 2012, 2014** [3] | 80 | **{mean:.1f}** |" in text


def test_dev_sts_may_be_a_path_into_the_evaluation_directory(model, small_eval_dir):
    path = small_eval_dir / "sts17" / "en-en.tsv"
    results = evaluate_model(model, small_eval_dir, ["sts17"], dev_sts=path)
    assert results.dev_sts == "sts17/en-en.tsv"
    assert results.to_dict()["sts17"]["en-en"]["dev"] is True


def test_a_model_trained_without_selection_has_no_dev_row(model, small_eval_dir, caplog):
    model.config.training = {"best_epoch": None, "best_score": None}
    results = evaluate_model(model, small_eval_dir, ["sts17"], dev_sts="sts17/en-en.tsv")
    assert results.dev_sts is None and not results.dev_unnamed
    assert results.to_dict()["sts17"]["en-en"]["dev"] is False
    assert "(dev)" not in results.to_markdown()
    assert "trained without model selection" in caplog.text


def test_a_model_selected_on_an_unnamed_dev_file_says_so(model, small_eval_dir, caplog):
    model.config.training = {"best_epoch": 3, "best_score": 61.5}
    results = evaluate_model(model, small_eval_dir, ["sts17"])
    assert results.dev_unnamed and results.to_dict()["dev_unnamed"] is True
    assert "selected on a dev STS file that this evaluation was not told" in (results.to_markdown())
    assert "best epoch 3" in caplog.text


def test_partial_sts_footnotes_name_what_is_missing(model, partial_eval_dir):
    results = evaluate_model(model, partial_eval_dir, ["sts"])
    years, mean = results.sts_years, results.sts_mean
    text = results.to_markdown()
    assert (
        f"STS 2012-2016 mean {mean.pearson:.1f} over 2012-2014 (2015, 2016 absent; "
        "2013 without SMT; 2014 without tweet-news); paper 74.6 over 2012-2016"
    ) in text
    assert (
        f"2013 mean {years['2013'].pearson:.1f} without SMT (not public); "
        "paper 64.7 over all 4 datasets"
    ) in text
    assert (
        f"2014 mean {years['2014'].pearson:.1f} without tweet-news; paper 78.1 over all 6 datasets"
    ) in text
    assert "| **2012 mean** |" in text  # 2012 is complete: no footnote
    assert "| **STS 2012-2016 mean, over 2012-2014** [3] |" in text

    sts = json.loads(json.dumps(results.to_dict()))["sts"]
    assert sts["mean_over_years"] == ["2012", "2013", "2014"]
    assert sts["years_absent"] == ["2015", "2016"]
    assert sts["datasets_absent"] == {"2013": ["SMT"], "2014": ["tweet-news"]}
    assert sts["mean_note"] == (
        "over 2012-2014 (2015, 2016 absent; 2013 without SMT; 2014 without tweet-news)"
    )
    assert sts["year_notes"] == {
        "2013": "without SMT (not public)",
        "2014": "without tweet-news",
    }


@pytest.mark.parametrize(
    ("evaluated", "dev", "note"),
    [
        (  # everything public: only 2013's SMT is missing
            {y: STS_YEAR_DATASETS[y] for y in STS_YEAR_DATASETS},
            None,
            "over 2012-2016 (2013 without SMT)",
        ),
        (
            {"2012": ["MSRpar"], "2014": STS_YEAR_DATASETS["2014"]},
            None,
            "over 2012, 2014 (2013, 2015, 2016 absent; "
            "2012 without MSRvid, OnWN, SMTeuroparl and SMTnews)",
        ),
        (  # a dataset the paper did not use
            {"2014": [*STS_YEAR_DATASETS["2014"], "mine"]},
            None,
            "over 2014 (2012, 2013, 2015, 2016 absent; 2014 with mine, which the paper did not use)",
        ),
        (  # the year's only dataset is the dev set
            {"2014": STS_YEAR_DATASETS["2014"], "2016": ["headlines"]},
            DevDataset("sts", "headlines", "2016"),
            "over 2014 (2012, 2013, 2015 absent; 2016 only the dev set headlines)",
        ),
        (  # a dev file that was not evaluated is simply absent
            {"2014": STS_YEAR_DATASETS["2014"]},
            DevDataset("sts", "OnWN", "2012"),
            "over 2014 (2012, 2013, 2015, 2016 absent)",
        ),
    ],
    ids=["all-public", "gaps", "extra", "dev-only-year", "dev-not-evaluated"],
)
def test_coverage_notes(evaluated, dev, note):
    assert sts_coverage(evaluated, dev).mean_note() == note


@pytest.mark.parametrize(
    ("path", "expected"),
    [
        ("sts17/en-en.tsv", DevDataset("sts17", "en-en")),
        ("sts/2014/OnWN.tsv", DevDataset("sts", "OnWN", "2014")),
        ("stsb/dev.tsv", DevDataset("stsb", "dev")),
        ("elsewhere/dev.tsv", None),
        ("sts17/en-en.txt", None),
        (None, None),
    ],
)
def test_dev_dataset_from_its_path(path, expected):
    assert dev_dataset(path) == expected


def test_hand_made_results_mark_an_sts_benchmark_dev_set():
    results = EvaluationResults(
        stsb={"dev": Correlation(70.0, 69.0, 1500), "train": Correlation(75.0, 74.0, 5749)},
        dev_sts="stsb/dev.tsv",
    )
    assert "| dev (dev) | 1500 | 70.0 | 69.0 |" in results.to_markdown()
    assert "| train | 5749 |" in results.to_markdown()
    assert results.to_dict()["stsb"]["dev"]["dev"] is True
