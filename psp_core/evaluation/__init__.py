"""Evaluation of P-SP models: STS 2012-2016, STS 2017, STS Benchmark, Tatoeba, speed.

    from psp_core import load_model
    from psp_core.evaluation import evaluate_model

    results = evaluate_model(
        load_model("models/de"), "../shared/data/eval", dev_sts="sts17/en-en.tsv"
    )
    print(results.to_markdown())          # our numbers beside the paper's
    results.to_dict()                     # JSON-ready, with a ``missing`` list

``dev_sts`` names the STS file the model was selected on: its row is marked dev and left out of
every mean. A mean over fewer datasets than the paper's (2013 without its non-public SMT set, a
year absent) carries a footnote naming what is missing beside the paper's number.

:class:`StsEvaluator` (one STS file -> Pearson x 100) is what training uses for model selection.
"""

from psp_core.evaluation.data import (
    DEFAULT_EVAL_SOURCES,
    EvalSource,
    fetch_eval_data,
    prepare_eval_data,
)
from psp_core.evaluation.plan import (
    LASER_CODES,
    EvaluationPlan,
    comparison_markdown,
    plan_for_language,
    plan_for_languages,
    scoreboard,
    scoreboard_markdown,
    scoreboard_rows,
)
from psp_core.evaluation.results import EvaluationResults
from psp_core.evaluation.runner import SUITES, evaluate_model
from psp_core.evaluation.speed import SpeedResult, measure_speed, speed_sentences
from psp_core.evaluation.sts import (
    STS17_TRACKS,
    STS_YEAR_DATASETS,
    Correlation,
    StsEvaluator,
    StsPairs,
    correlation,
    evaluate_sts_pairs,
    pearson,
    read_sts_file,
    spearman,
)
from psp_core.evaluation.tatoeba import TatoebaScore, error_rate, tatoeba_errors

__all__ = [
    "DEFAULT_EVAL_SOURCES",
    "LASER_CODES",
    "EvaluationPlan",
    "comparison_markdown",
    "plan_for_language",
    "plan_for_languages",
    "scoreboard",
    "scoreboard_markdown",
    "scoreboard_rows",
    "STS17_TRACKS",
    "STS_YEAR_DATASETS",
    "SUITES",
    "Correlation",
    "EvalSource",
    "EvaluationResults",
    "SpeedResult",
    "StsEvaluator",
    "StsPairs",
    "TatoebaScore",
    "correlation",
    "error_rate",
    "evaluate_model",
    "evaluate_sts_pairs",
    "fetch_eval_data",
    "measure_speed",
    "pearson",
    "prepare_eval_data",
    "read_sts_file",
    "spearman",
    "speed_sentences",
    "tatoeba_errors",
]
