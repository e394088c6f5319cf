"""Evaluation of P-SP models: the registered suites (STS 2012-2016, STS 2017, STS Benchmark,
Tatoeba, speed; :mod:`psp_core.evaluation.suite` says how to add one).

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

from psp_core.lazy_exports import lazy_exports

# public name -> the module that defines it (imported on first use: a light install's
# `psp` builds its parser from the suites without importing requests or torch)
_EXPORTS = {
    "comparison_markdown": "psp_core.evaluation.plan",
    "Correlation": "psp_core.evaluation.sts",
    "correlation": "psp_core.evaluation.sts",
    "default_eval_sources": "psp_core.evaluation.data",
    "EvalSource": "psp_core.evaluation.suite",
    "error_rate": "psp_core.evaluation.retrieval",
    "evaluate_model": "psp_core.evaluation.runner",
    "evaluate_sts_pairs": "psp_core.evaluation.sts",
    "EvaluationPlan": "psp_core.evaluation.plan",
    "EvaluationResults": "psp_core.evaluation.results",
    "fetch_eval_data": "psp_core.evaluation.data",
    "LASER_CODES": "psp_core.evaluation.suites.tatoeba",
    "measure_speed": "psp_core.evaluation.speed",
    "pearson": "psp_core.evaluation.sts",
    "plan_for_language": "psp_core.evaluation.plan",
    "plan_for_languages": "psp_core.evaluation.plan",
    "prepare_eval_data": "psp_core.evaluation.data",
    "read_sts_file": "psp_core.evaluation.sts",
    "register": "psp_core.evaluation.registry",
    "registered": "psp_core.evaluation.registry",
    "Score": "psp_core.evaluation.suite",
    "scoreboard": "psp_core.evaluation.plan",
    "scoreboard_markdown": "psp_core.evaluation.plan",
    "scoreboard_rows": "psp_core.evaluation.plan",
    "spearman": "psp_core.evaluation.sts",
    "speed_sentences": "psp_core.evaluation.speed",
    "SpeedResult": "psp_core.evaluation.speed",
    "STS17_TRACKS": "psp_core.evaluation.sts",
    "STS_YEAR_DATASETS": "psp_core.evaluation.sts",
    "StsEvaluator": "psp_core.evaluation.sts",
    "StsPairs": "psp_core.evaluation.sts",
    "Suite": "psp_core.evaluation.suite",
    "suite_names": "psp_core.evaluation.registry",
    "SuiteRun": "psp_core.evaluation.suite",
    "suites_with_data": "psp_core.evaluation.runner",
    "tatoeba_errors": "psp_core.evaluation.suites.tatoeba",
    "TatoebaScore": "psp_core.evaluation.suites.tatoeba",
    "unregister": "psp_core.evaluation.registry",
}

__all__ = [
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
    "Correlation",
    "EvalSource",
    "EvaluationResults",
    "Score",
    "SpeedResult",
    "StsEvaluator",
    "StsPairs",
    "Suite",
    "SuiteRun",
    "TatoebaScore",
    "correlation",
    "default_eval_sources",
    "error_rate",
    "evaluate_model",
    "evaluate_sts_pairs",
    "fetch_eval_data",
    "measure_speed",
    "pearson",
    "prepare_eval_data",
    "read_sts_file",
    "register",
    "registered",
    "spearman",
    "speed_sentences",
    "suite_names",
    "suites_with_data",
    "tatoeba_errors",
    "unregister",
]
__getattr__, __dir__ = lazy_exports(globals(), _EXPORTS)
