import pytest

from psp_core.evaluation import (
    EvaluationPlan,
    EvaluationResults,
    plan_for_language,
    scoreboard_markdown,
    scoreboard_rows,
)
from psp_core.evaluation.sts import STS_YEAR_DATASETS, Correlation
from psp_core.evaluation.suites.tatoeba import TatoebaScore


def _plan(suites: tuple[str, ...], tracks: tuple[str, ...], languages: tuple[str, ...]):
    """The plan of ``suites`` with these STS 2017 tracks and Tatoeba languages."""
    return EvaluationPlan(suites, {"sts17": tracks, "tatoeba": languages})


@pytest.mark.parametrize(
    ("lang", "plan"),
    [
        ("en", _plan(("sts", "sts17", "stsb", "speed"), ("en-en",), ())),
        ("de", _plan(("sts", "tatoeba", "speed"), (), ("deu",))),
        ("ar", _plan(("sts", "sts17", "tatoeba", "speed"), ("ar-ar", "ar-en"), ("ara",))),
        (
            "es",
            _plan(("sts", "sts17", "tatoeba", "speed"), ("es-es", "es-en", "es-en-wmt"), ("spa",)),
        ),
        ("tr", _plan(("sts", "sts17", "tatoeba", "speed"), ("tr-en",), ("tur",))),
        ("zh_cn", _plan(("sts", "tatoeba", "speed"), (), ("cmn",))),
        ("sw", _plan(("sts", "speed"), (), ())),  # nothing language-specific
    ],
)
def test_each_language_gets_the_papers_evaluation(lang, plan):
    assert plan_for_language(lang) == plan


def _results(sts17: dict, tatoeba: dict) -> dict:
    results = EvaluationResults(model="m")
    results.sts = {"2012": {"MSRpar": Correlation(60.0, 55.0, 750)}}
    results.sts17 = {name: Correlation(value, value, 250) for name, value in sts17.items()}
    results.tatoeba = {code: TatoebaScore(1000, c, c, m, m) for code, (c, m) in tatoeba.items()}
    return results.to_dict()


def test_scoreboard_puts_languages_side_by_side_with_the_papers_numbers():
    board = {
        "es": _results({"es-es": 74.25, "es-en": 23.7}, {"spa": (12.0, 10.5)}),
        "ar": _results({"ar-ar": 4.5}, {"ara": (50.0, 45.0)}),
    }
    rows = scoreboard_rows(board)
    assert [row["lang"] for row in rows] == ["ar", "es"]
    assert rows[1]["sts17_pearson"] == {"es-es": 74.25, "es-en": 23.7}
    assert rows[1]["tatoeba_error"] == {"spa": {"cosine": 12.0, "margin": 10.5}}
    table = scoreboard_markdown(board).splitlines()
    assert len(table) == 4
    assert table[2].startswith(
        "| ar | 60.0 over 2012 (2013, 2014, 2015, 2016 absent; 2012 without MSRvid, OnWN, "
        "SMTeuroparl and SMTnews) | 74.6 | ar-ar 4.5 (76.2) |"
    )
    assert "es-en 23.7 (78.4), es-es 74.2 (85.8)" in table[3]
    assert "spa 12.0 (2.4) / 10.5" in table[3]


def test_scoreboard_labels_the_papers_mean_by_its_years_and_marks_the_dev_track():
    """The paper's 74.6 is its 2012-2016 mean: it gets a column saying so, and ours says what it
    is over (it read "44.7 (74.6) (2012-2014)", the paper's number beside a 2012-2014 mean)."""
    results = EvaluationResults(model="en", dev_sts="sts17/en-en.tsv")
    results.sts = {
        year: {name: Correlation(44.7, 40.0, 100) for name in STS_YEAR_DATASETS[year]}
        for year in ("2012", "2013", "2014")
    }
    results.sts17 = {"en-en": Correlation(80.0, 79.0, 250), "es-en": Correlation(23.7, 20.0, 250)}
    board = {"en": results.to_dict()}

    header, _, row = scoreboard_markdown(board).splitlines()
    assert "| paper STS 2012-2016 mean |" in header
    assert row == (
        "| en | 44.7 over 2012-2014 (2015, 2016 absent; 2013 without SMT) | 74.6 "
        "| en-en (dev) 80.0, es-en 23.7 (78.4) | - | - | - |"
    )
    (scored,) = scoreboard_rows(board)
    assert scored["sts_mean_note"] == "over 2012-2014 (2015, 2016 absent; 2013 without SMT)"
    assert scored["dev_sts"] == "sts17/en-en.tsv" and scored["sts17_dev"] == "en-en"
    assert scored["sts_years"] == ["2012", "2013", "2014"]
