"""evaluation_scoreboard: every language's evaluation in one table (not partitioned).

Reads the ``results.json`` of each language's latest ``model_evaluation`` under the storage root
and renders them side by side with the paper's numbers (``psp_core.evaluation``); languages
without an evaluation yet are listed, not guessed.
"""

import json

from dagster import (
    AllPartitionMapping,
    AssetDep,
    AutomationCondition,
    MaterializeResult,
    MetadataValue,
    asset,
)

from assets.framework.catalog import OWNERS, SCOREBOARD_GROUP
from assets.framework.stage import read_manifest
from assets.lifecycle.evaluation_tables import scoreboard_tables
from assets.settings.languages import MULTI, load_registry
from assets.settings.resources import StorageResource
from ops.sources.text_io import atomic_path
from psp_core.evaluation import scoreboard

#: evaluations made before the automation's first tick (the daemon started after them): the
#: scoreboard was never built while some language has an evaluation; fires on the tick it
#: becomes true, not on every tick after
_NEVER_BUILT_SINCE_EVALUATIONS = (
    AutomationCondition.missing()
    & AutomationCondition.any_deps_match(~AutomationCondition.missing())
).newly_true()

#: a language's evaluation was materialized since the last tick (or before the first one, with
#: no scoreboard yet), and nothing upstream or of the scoreboard itself is running
SCOREBOARD_REFRESH = (
    (AutomationCondition.any_deps_updated() | _NEVER_BUILT_SINCE_EVALUATIONS)
    & ~AutomationCondition.any_deps_in_progress()
    & ~AutomationCondition.in_progress()
).with_label("a language's evaluation is new")


@asset(
    group_name=SCOREBOARD_GROUP,
    owners=OWNERS,
    deps=[
        AssetDep("model_evaluation", partition_mapping=AllPartitionMapping()),
        "multi_evaluation",
    ],
    kinds={"markdown"},
    # refreshed by itself once any language's evaluation is new (not eager(): that waits for
    # every language's evaluation to exist, and most deployments evaluate a few)
    automation_condition=SCOREBOARD_REFRESH,
)
def evaluation_scoreboard(storage: StorageResource) -> MaterializeResult:
    """One table across languages (and the multilingual model), a column or more per
    evaluation suite (STS, STS 2017, STS-B, retrieval errors by cosine / margin, speed); then
    the multilingual model beside the per-language models, set by set."""
    results, not_evaluated = {}, []
    for code in [*sorted(load_registry().codes), MULTI]:
        manifest = read_manifest(storage.stage_dir(code, "model_evaluation"))
        if manifest is None or not manifest.complete():
            if code != MULTI:  # the multilingual model is optional: not listed as missing
                not_evaluated.append(code)
            continue
        results[code] = json.loads(manifest.output("json").read_text(encoding="utf-8"))
    board = scoreboard(results, MULTI)
    table = board.markdown
    if not_evaluated:
        table += "\n\nNot evaluated yet: " + ", ".join(not_evaluated)
    if board.compared:
        table += "\n\nThe multilingual model beside the per-language models:\n\n"
        table += board.comparison_markdown
    directory = storage.stage_dir("_all", "evaluation_scoreboard")
    with atomic_path(directory / "scoreboard.md") as tmp:
        tmp.write_text(table + "\n", encoding="utf-8")
    with atomic_path(directory / "scoreboard.json") as tmp:
        saved = {
            "languages": board.rows,
            "not_evaluated": not_evaluated,
            "multi_vs_languages": board.compared,
        }
        tmp.write_text(json.dumps(saved, indent=2) + "\n", encoding="utf-8")
    return MaterializeResult(
        metadata={
            **scoreboard_tables(board.rows, board.compared),
            "languages": MetadataValue.text(", ".join(sorted(results)) or "none yet"),
            "not_evaluated": MetadataValue.text(", ".join(not_evaluated) or "none"),
            "path": MetadataValue.path(str(directory / "scoreboard.md")),
        }
    )
